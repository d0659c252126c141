"""Turn-based games: their engines, the fixed players that sit at them, whole games between two
players, a person at the terminal, and the self-play league a game's run trains against."""
