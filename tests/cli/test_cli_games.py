"""A trained game agent from the command line: ``fastppo eval`` on a turn-based game (games
against ``--opponent``, seats swapped, wins/draws/losses per seat) and ``fastppo play`` (a person
types moves in the terminal: fastppo.games.human, fastppo.games.board_text)."""

from __future__ import annotations

import ast
import io
import json
import re
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pyspiel")
pytest.importorskip("rlcard")

import fastppo
from fastppo.cli.main import main
from fastppo.games.board_text import board_text
from fastppo.games.game_env import make_game
from fastppo.games.human import HumanPlayer, Quit, play_against
from fastppo.games.players import AgentPlayer
from tests.support.fake_pz_envs import FirstLegal  # the lowest legal move, always: a player without chance
from tests.support.games import leduc_agent
from tests.support.paths import SUPPORT

TICTACTOE = "pz:pettingzoo.classic.tictactoe_v3"
CONNECT_FOUR = "pz:pettingzoo.classic.connect_four_v3"
LEDUC = "pz:pettingzoo.classic.leduc_holdem_v4"
TINY = dict(total_timesteps=1024, num_envs=4, num_steps=32, progress=False, tensorboard=False)

pytestmark = [
    pytest.mark.games,
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("games")
    fastppo.train(TICTACTOE, run_dir=folder / "tictactoe", seed=1, **TINY)
    fastppo.train("CartPole-v1", run_dir=folder / "cartpole", **TINY)
    return {"tictactoe": folder / "tictactoe", "cartpole": folder / "cartpole"}


def without_timing(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("seconds", "games_per_second")}


# --- fastppo eval on a game -------------------------------------------------------------------


def test_eval_of_a_game_prints_each_seats_results_against_random(runs, capsys):
    run = runs["tictactoe"]
    assert main(["eval", str(run), "--games", "10", "--seed", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert re.match(
        rf"fastppo: {TICTACTOE}: player {run} vs opponent random, 10 games, \d+ moves, [\d.]+ s \([\d.]+ games/s\)$",
        lines[0],
    )
    rows = {line.split()[0]: [int(n) for n in line.split()[1:5]] for line in lines[2:]}
    assert set(rows) == {"player_1", "player_2", "all"}
    assert [rows[seat][0] for seat in ("player_1", "player_2", "all")] == [5, 5, 10]
    assert all(games == wins + draws + losses for games, wins, draws, losses in rows.values())
    # --json: the same games (seeded) as the Python API gives, the agent on its most likely move
    assert main(["eval", str(run), "--games", "10", "--seed", "0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [data["seats"][seat]["wins"] for seat in ("player_1", "player_2")] == [
        rows["player_1"][1],
        rows["player_2"][1],
    ]
    assert without_timing(data) == without_timing(fastppo.evaluate(run, games=10, seed=0).to_dict())
    assert data["seed"] == 0 and data["player"] == str(run)


def test_eval_with_search_names_it_and_never_loses_to_perfect_tictactoe(runs, capsys):
    run = runs["tictactoe"]  # a few hundred steps of training: the search, not the policy, plays
    assert main(["eval", str(run), "--opponent", "minimax", "--games", "4", "--seed", "0", "--search", "1000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"fastppo: {TICTACTOE}: player {run} (search 1000) vs opponent minimax, 4 games")
    assert lines[-1].split()[:5] == ["all", "4", "0", "4", "0"]  # perfect play both sides: draws


@pytest.mark.parametrize("opponent", ["mcts:5", "minimax", "{run}"])
def test_eval_plays_every_kind_of_opponent(runs, capsys, opponent):
    opponent = opponent.format(run=runs["tictactoe"])
    assert main(["eval", str(runs["tictactoe"]), "--opponent", opponent, "--games", "4", "--seed", "0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["opponent"], data["games"], data["seats"]["player_2"]["games"]) == (opponent, 4, 2)


def test_a_games_agent_plays_its_most_likely_move_unless_told_to_sample(runs):
    """Against a player without chance, a deterministic agent plays the same game from each seat
    every time: one outcome per seat. Sampling (--stochastic) mixes them."""
    most_likely = fastppo.evaluate(runs["tictactoe"], opponent=FirstLegal(), games=20, seed=0)
    assert all(max(seat.wins, seat.draws, seat.losses) == 10 for seat in most_likely.seats)
    assert most_likely.moves % 10 == 0
    sampled = fastppo.evaluate(runs["tictactoe"], opponent=FirstLegal(), games=20, seed=0, deterministic=False)
    assert sampled.player == f"{runs['tictactoe']} (sampling)"
    assert any(max(seat.wins, seat.draws, seat.losses) < 10 for seat in sampled.seats)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["eval", "{cartpole}", "--opponent", "random"],
            "--opponent, --games and --search play turn-based games, and CartPole-v1 is not one",
        ),
        (
            ["eval", "{cartpole}", "--games", "5"],
            "--opponent, --games and --search play turn-based games, and CartPole-v1 is not one",
        ),
        (
            ["eval", "{tictactoe}", "--episodes", "5"],
            f"{TICTACTOE} is a turn-based game: count its games with --games N (default 100), not --episodes",
        ),
        (["eval", "{tictactoe}", "--games", "0"], "--games must be >= 1, got 0"),
        (
            ["eval", "{tictactoe}", "--opponent", "mcts:0"],
            "--opponent mcts:0: MCTS needs 2 to 10000 simulations per move",
        ),
        (
            ["eval", "{tictactoe}", "--opponent", "mcts:1"],
            "--opponent mcts:1: MCTS needs 2 to 10000 simulations per move",
        ),
        (
            ["eval", "{tictactoe}", "--opponent", "mcts:99999999999999999999999"],
            "--opponent mcts:99999999999999999999999: MCTS needs 2 to 10000 simulations per move",
        ),
        (
            ["eval", "{tictactoe}", "--opponent", ""],
            "--opponent '': an empty name names no opponent (nor the working directory)",
        ),
        (
            ["eval", "{tictactoe}", "--opponent", "tests.support.fake_pz_envs:NoSuchPlayer"],
            "--opponent tests.support.fake_pz_envs:NoSuchPlayer: tests.support.fake_pz_envs:NoSuchPlayer "
            "names nothing, not a player class",
        ),
        (
            ["eval", "{tictactoe}", "--opponent", "tests.support.fake_pz_envs:race"],
            "--opponent tests.support.fake_pz_envs:race: tests.support.fake_pz_envs:race names a function, "
            "not a player class",
        ),
        (
            ["eval", "{tictactoe}", "--opponent", "tests.support.fake_pz_envs:Broken"],
            "--opponent tests.support.fake_pz_envs:Broken: tests.support.fake_pz_envs:Broken() raised "
            "ValueError: the board is missing; a player class is built with no arguments",
        ),
        (
            ["eval", "{tictactoe}", "--opponent", "tests/nowhere.py:Player"],
            "--opponent tests/nowhere.py:Player: cannot load the player 'tests/nowhere.py:Player': no Python "
            "file at tests/nowhere.py",
        ),
        (["eval", "{tictactoe}", "--opponent", "nobody"], "--opponent nobody: unknown opponent, and no such folder"),
        (
            ["eval", "{tictactoe}", "--opponent", "{cartpole}"],
            "--opponent {cartpole}: {cartpole} holds an agent trained on CartPole-v1, not on " + TICTACTOE,
        ),
        (
            ["eval", "{tictactoe}", "--env-id", CONNECT_FOUR],
            f"the agent was trained on {TICTACTOE}, not on {CONNECT_FOUR}",
        ),
        (["eval", "{tictactoe}", "--search", "1"], "--search needs 2 to 10000 simulations per move"),
        (["eval", "{tictactoe}", "--search", "x"], "argument --search: invalid int value: 'x'"),
        (
            ["eval", "{tictactoe}", "--search", "10", "--stochastic"],
            "--search plays the most visited move of its search: drop --stochastic",
        ),
        (
            ["eval", "{cartpole}", "--search", "10"],
            "--opponent, --games and --search play turn-based games, and CartPole-v1 is not one",
        ),
        (
            ["eval", "{tictactoe}", "--deterministic", "--stochastic"],
            "argument --stochastic: not allowed with argument --deterministic",
        ),
        (
            ["play", "{cartpole}"],
            f"CartPole-v1 has no text board to play on: a person can play {TICTACTOE}, {CONNECT_FOUR}, {LEDUC}",
        ),
        (["play", "{tictactoe}", "--games", "0"], "--games must be >= 1, got 0"),
        (
            ["play", "{tictactoe}", "--search", "10", "--stochastic"],
            "--search plays the most visited move of its search: drop --stochastic",
        ),
        (["play", "{tictactoe}", "--search", "1"], "--search needs 2 to 10000 simulations per move"),
        (["play", "{tictactoe}", "--seat", "2"], "argument --seat: invalid choice: 2"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(runs, capsys, argv, message):
    argv, message = [a.format(**runs) for a in argv], message.format(**runs)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"fastppo: error: {message}"), err


# --- the boards as text -----------------------------------------------------------------------


def played(env_id: str, moves: list[int], seed: int = 0):
    env = make_game(env_id)
    env.reset(seed=seed)
    for move in moves:
        env.step(move)
    return env


def test_tictactoe_and_connect_four_are_drawn_with_the_numbers_moves_are_typed_as():
    # X in cells 0 and 8 (top left, bottom right: PettingZoo counts column by column), O in 4 and 3
    assert board_text(TICTACTOE).position(played(TICTACTOE, [0, 4, 8, 3]), "player_1") == "\n".join(
        ["you are X (player_1)", " X | O | 6", "---+---+---", " 1 | O | 7", "---+---+---", " 2 | 5 | X"]
    )
    # X in columns 3 and 4, O on top of 3
    assert board_text(CONNECT_FOUR).position(played(CONNECT_FOUR, [3, 3, 4]), "player_1") == "\n".join(
        ["you are O (player_1)", *[". . . . . . ."] * 4, ". . . O . . .", ". . . X X . .", "0 1 2 3 4 5 6"]
    )


def test_leduc_is_told_in_words_from_the_observation():
    """The card, public card and chips said are rlcard's own (its game state, not the observation)."""
    text = board_text(LEDUC)
    for seed in range(6):
        env = played(LEDUC, [1, 0], seed)  # a raise and a call: round 2, the public card dealt
        game = env.unwrapped.env.game
        seat = env.agent_selection
        me, other = game.players[env.possible_agents.index(seat)], game.players[1 - env.possible_agents.index(seat)]
        expected = (
            f"you are {seat}: your card {me.hand.rank}, public card {game.public_card.rank}; chips in: you "
            f"{me.in_chips}, the opponent {other.in_chips}"
        )
        assert text.position(env, seat) == expected
    first = played(LEDUC, [])
    assert "public card not dealt yet" in text.position(first, first.agent_selection)
    assert [text.move(action) for action in range(4)] == ["0 call", "1 raise", "2 fold", "3 check"]


# --- a person plays -----------------------------------------------------------------------------


class Typist:
    """Types the given entries one by one, then ends the input; notes what it was shown."""

    def __init__(self, *entries: str):
        self.entries, self.shown = list(entries), []

    def read(self, prompt: str) -> str:
        self.shown.append(prompt)
        if not self.entries:
            raise EOFError
        return self.entries.pop(0)

    def write(self, text: str) -> None:
        self.shown.append(text)


def test_an_entry_that_is_no_legal_move_is_asked_again_with_a_reason():
    env = played(TICTACTOE, [0, 4])  # X at 0, O at 4: X to move
    typist = Typist("", "x", "4", "12", "-1", " 3 ")
    assert HumanPlayer(TICTACTOE, typist.read, typist.write).act(env, "player_1", [0, 4]) == 3
    reasons = [line for line in typist.shown if line.startswith(("'", "4 ", "12 "))]
    legal = "1 2 3 5 6 7 8"
    assert reasons == [
        f"'' is not a move: type one of {legal}",
        f"'x' is not a move: type one of {legal}",
        f"4 is not a legal move now: type one of {legal}",
        f"12 is not a legal move now: type one of {legal}",
        f"'-1' is not a move: type one of {legal}",
    ]
    assert typist.shown[:4] == [
        "",
        "last move: 4",
        board_text(TICTACTOE).position(env, "player_1"),
        "your moves: 1, 2, 3, 5, 6, 7, 8",
    ]


def test_an_entry_int_cannot_read_is_asked_again():
    """'²' passes str.isdigit; int() refuses it, and a number of more than 4300 digits."""
    typist = Typist("²", "9" * 5000, "003")
    assert HumanPlayer(TICTACTOE, typist.read, typist.write).act(played(TICTACTOE, [0, 4]), "player_1", [0, 4]) == 3
    legal = "1 2 3 5 6 7 8"
    assert [line for line in typist.shown if "not a" in line] == [
        f"'²' is not a move: type one of {legal}",
        f"{'9' * 20}... is not a legal move now: type one of {legal}",
    ]


@pytest.mark.parametrize("entries", [("q",), ("Q",), ()])
def test_q_or_the_end_of_input_quits(entries):
    typist = Typist(*entries)
    with pytest.raises(Quit):
        HumanPlayer(TICTACTOE, typist.read, typist.write).act(played(TICTACTOE, []), "player_1", [])


def winner(board: list[str]) -> str | None:
    """X or O when it holds a line of three on a drawn tic-tac-toe board (rows of ``a | b | c``)."""
    cells = [[cell.strip() for cell in row.split("|")] for row in board]
    lines = (
        cells
        + [list(column) for column in zip(*cells)]
        + [[cells[i][i] for i in range(3)], [cells[i][2 - i] for i in range(3)]]
    )
    return next((line[0] for line in lines if line[0] in "XO" and len(set(line)) == 1), None)


@pytest.mark.parametrize(("seat", "mark"), [("0", "X"), ("1", "O")])
def test_a_person_plays_a_whole_game_of_tictactoe_typed_on_stdin(runs, monkeypatch, capsys, seat, mark):
    """The person types the cells 0 to 8 over and over: each taken cell is refused and the next
    one read, so they play the lowest free cell from where they are in the list. The game ends
    in a finished position, with the result that position shows."""
    monkeypatch.setattr("sys.stdin", io.StringIO("x\n" + "".join(f"{cell}\n" for cell in range(9)) * 9))
    assert main(["play", str(runs["tictactoe"]), "--seat", seat, "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert f"game 1 of 1: you play player_{int(seat) + 1}" in out
    assert "'x' is not a move: type one of " in out
    lines = out.splitlines()
    result = next(i for i, line in enumerate(lines) if line.startswith(("you won", "you lost", "a draw")))
    final = [lines[result - 5], lines[result - 3], lines[result - 1]]
    won_by = winner(final)
    assert lines[result - 6] == f"you are {mark} (player_{int(seat) + 1})"
    assert won_by is not None or not re.search(r"\d", "".join(final))  # a line of three, or a full board
    outcome = "a draw" if won_by is None else "you won" if won_by == mark else "you lost"
    assert lines[result].startswith(outcome)
    assert lines[result + 1] == (
        f"score: {int(outcome == 'you won')} won, {int(outcome == 'a draw')} drawn, {int(outcome == 'you lost')} lost"
    )


@pytest.mark.parametrize("seat", ["0", "1"])
def test_a_person_plays_the_agents_search(runs, monkeypatch, capsys, seat):
    """The same typist (the lowest free cell) against --search 1000: the agent, barely trained,
    looks far enough ahead that the person never wins (its policy alone loses from both seats)."""
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(f"{cell}\n" for cell in range(9)) * 9))
    assert main(["play", str(runs["tictactoe"]), "--seat", seat, "--seed", "0", "--search", "1000"]) == 0
    assert re.search(r"^score: 0 won, [01] drawn, [01] lost$", capsys.readouterr().out, re.MULTILINE)


def test_the_second_seat_sees_the_agents_first_move_and_quitting_exits_0(runs, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("q\n"))
    assert main(["play", str(runs["tictactoe"]), "--seat", "1"]) == 0
    out = capsys.readouterr().out
    first = AgentPlayer(fastppo.load(runs["tictactoe"])).act(played(TICTACTOE, []), "player_1", [])
    assert f"last move: {first}" in out and out.count("X") == 1 and out.rstrip().endswith("fastppo: quit")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # end of input at once
    assert main(["play", str(runs["tictactoe"]), "--games", "3"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("fastppo: quit")


def test_ctrl_c_at_the_prompt_stops_with_130(runs, monkeypatch, capsys):
    class Interrupted(io.StringIO):
        def readline(self, *args):
            raise KeyboardInterrupt

    monkeypatch.setattr("sys.stdin", Interrupted())
    assert main(["play", str(runs["tictactoe"])]) == 130
    assert capsys.readouterr().err.strip() == "fastppo: SIGINT: stopped at once"


# --- the documented loop ----------------------------------------------------------------------


def test_the_documented_loop_plays_a_trained_agent_in_pettingzoos_own_loop(runs, capsys):
    """The loop in AgentPlayer's docstring, run as written (the run folder its only change)."""
    code = textwrap.dedent(AgentPlayer.__doc__.split("::\n", 1)[1])
    assert code.count('"runs/tictactoe"') == 1
    exec(code.replace('"runs/tictactoe"', repr(str(runs["tictactoe"]))), {})
    returns = ast.literal_eval(capsys.readouterr().out)  # the dict the loop printed
    assert (
        set(returns) == {"player_1", "player_2"}
        and sum(returns.values()) == 0
        and set(returns.values()) <= {-1.0, 0.0, 1.0}
    )


def test_leduc_games_show_the_opponents_card_at_the_end_and_score_the_showdown():
    """The person calls or checks (typing 0, then 3 when 0 is refused, and so on), the agent raises
    where it may and calls otherwise: every hand reaches the showdown, which the cards shown
    decide (a pair with the public card, else the higher card)."""
    typist = Typist(*["0", "3"] * 60)
    score = play_against(leduc_agent(), HumanPlayer(LEDUC, typist.read, typist.write), games=6, seed=0)
    shown = [line for line in typist.shown if line]
    ends = [i for i, line in enumerate(shown) if line.startswith(("you won", "you lost", "a draw"))]
    assert len(ends) == score.games == 6
    outcomes = []
    for end in ends:
        final, revealed = shown[end - 2], shown[end - 1]
        mine, public = re.match(r"you are player_\d: your card ([JQK]), public card ([JQK]);", final).groups()
        theirs = re.fullmatch(r"the opponent held ([JQK])", revealed).group(1)
        if mine == public or theirs == public:
            expected = "you won" if mine == public else "you lost"
        else:
            expected = (
                "a draw" if mine == theirs else "you won" if "JQK".index(mine) > "JQK".index(theirs) else "you lost"
            )
        assert shown[end].startswith(expected)
        outcomes.append(expected)
    assert (score.wins, score.draws, score.losses) == tuple(
        outcomes.count(o) for o in ("you won", "a draw", "you lost")
    )


# --- a player class of yours as the opponent, a game of yours ----------------------------------


def test_a_player_class_of_yours_plays_from_the_command_line(runs, capsys, tmp_path):
    """--opponent module:Class or file.py:Class names a player class as env ids name an env: the
    games are those ``fastppo.evaluate`` plays against an instance from Python."""
    run = runs["tictactoe"]
    from_python = without_timing(fastppo.evaluate(run, opponent=FirstLegal(), games=6, seed=0).to_dict())
    assert (
        main(
            [
                "eval",
                str(run),
                "--opponent",
                "tests.support.fake_pz_envs:FirstLegal",
                "--games",
                "6",
                "--seed",
                "0",
                "--json",
            ]
        )
        == 0
    )
    assert without_timing(json.loads(capsys.readouterr().out)) == from_python
    (tmp_path / "players.py").write_text(
        "from tests.support.fake_pz_envs import FirstLegal\n\n\nclass Mine(FirstLegal):\n    pass\n"
    )
    assert (
        main(["eval", str(run), "--opponent", f"{tmp_path}/players.py:Mine", "--games", "6", "--seed", "0", "--json"])
        == 0
    )
    assert without_timing(json.loads(capsys.readouterr().out)) == from_python  # named 'first legal' by its class


RACE_FILE = SUPPORT / "fake_pz_envs.py"


def test_eval_takes_a_game_file_named_from_its_own_folder(tmp_path, monkeypatch, capsys):
    """A run saves a game file's absolute path; --env-id may name it relative to the working
    directory (as train --resume may): the same file."""
    monkeypatch.chdir(RACE_FILE.parent)
    relative = f"pz:{RACE_FILE.name}:race"
    fastppo.train(
        relative,
        preset="cleanrl-discrete",
        run_dir=tmp_path / "race",
        total_timesteps=640,
        num_envs=2,
        num_steps=32,
        progress=False,
        tensorboard=False,
    )
    assert main(["eval", str(tmp_path / "race"), "--env-id", relative, "--games", "4", "--seed", "0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["game"], data["games"]) == (relative, 4)
    assert (
        main(
            [
                "eval",
                str(tmp_path / "race"),
                "--env-id",
                relative,
                "--opponent",
                str(tmp_path / "race"),
                "--games",
                "2",
                "--json",
            ]
        )
        == 0
    )  # its own folder as the opponent
    assert json.loads(capsys.readouterr().out)["games"] == 2
    assert (
        main(["eval", str(tmp_path / "race"), "--env-id", "pz:tests.support.fake_pz_envs:race", "--games", "2"]) == 2
    )  # the same game by another name is another env
    assert "the agent was trained on pz:" in capsys.readouterr().err
