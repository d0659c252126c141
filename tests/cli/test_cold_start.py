"""What a fresh process pays before and after the work: no module the default path does not use,
and no interpreter teardown after the `fastppo` command is done (benchmarks/README.md, "Cold start")."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_a_fresh_cartpole_run_imports_no_module_it_does_not_use(tmp_path):
    """torch.optim's first use imports torch._dynamo (~1.3 s on 2 cores), ale-py ~30-90 ms: a
    default CartPole run needs neither."""
    code = (
        "import sys, fastppo\n"
        f"fastppo.train('CartPole-v1', total_timesteps=2048, seed=1, run_dir={str(tmp_path)!r}, progress=False)\n"
        "print(sorted(m for m in ('torch._dynamo', 'ale_py') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
    assert list(tmp_path.glob("events.out.tfevents.*"))


def test_the_console_command_flushes_runs_atexit_handlers_and_keeps_every_file(tmp_path):
    """``cli.console`` ends with os._exit after main(): output, exit handlers and the run's files
    must all be there, as after a normal interpreter exit."""
    run_dir = tmp_path / "run"
    argv = [
        "fastppo",
        "train",
        "CartPole-v1",
        "--total-timesteps",
        "2048",
        "--run-dir",
        str(run_dir),
        "--progress",
        "false",
    ]
    code = (
        f"import atexit, sys\natexit.register(print, 'atexit ran')\nsys.argv = {argv!r}\n"
        "from fastppo.cli.main import console\nconsole()\n"
    )
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # pipes block-buffered, as usual
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=buffered)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("atexit ran")
    assert "fastppo: results in" in proc.stdout + proc.stderr
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["global_step"] == 2048
    assert (run_dir / "policy.safetensors").is_file() and (run_dir / "agent.json").is_file()
    assert list(run_dir.glob("events.out.tfevents.*"))
    bad = subprocess.run(
        [sys.executable, "-m", "fastppo.cli", "train", "CartPole-v1", "--num-envs", "x"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and bad.stderr.startswith("fastppo: error:")


def test_the_console_command_exits_with_an_idle_thread_pool_alive():
    """A command may leave an idle ``ThreadPoolExecutor`` behind (``torch.compile`` keeps one for
    its kernels): its workers stop at the interpreter's thread shutdown, which ``cli.console``
    must run (joining them directly hung ``fastppo train --compile`` after its work was done)."""
    code = (
        "import sys\nfrom concurrent.futures import ThreadPoolExecutor\n"
        "pool = ThreadPoolExecutor(2)\npool.submit(print, 'pool ran').result()\n"
        "sys.argv = ['fastppo', 'train', 'CartPole-v1', '--num-envs', '0']\n"
        "from fastppo.cli.main import console\nconsole()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "pool ran" in proc.stdout and proc.stderr.startswith("fastppo: error:")


def test_a_signal_while_the_finished_commands_handlers_are_swapped_exits_with_its_code():
    """torchrun ends the other ranks of a failed launch with SIGTERM, at any moment: one that lands
    as ``console`` swaps its handlers after the command returned still meets ``stop_at_once``, and
    must end the process with the command's code (here 2), not a traceback."""
    code = (
        "import os, signal, sys\nswap = signal.signal\n"
        "def landing(signum, handler):\n"
        "    signal.signal = swap\n    os.kill(os.getpid(), signal.SIGTERM)\n    return swap(signum, handler)\n"
        "import fastppo.cli.main as cli\nreal_main = cli.main\n"
        "def main():\n    code = real_main()\n    signal.signal = landing\n    return code\n"
        "cli.main = main\nsys.argv = ['fastppo', 'train', 'CartPole-v1', '--num-envs', '0']\ncli.console()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("fastppo: error:"), proc.stderr
