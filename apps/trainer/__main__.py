"""Lets ``uv run apps/trainer ...`` (and ``python apps/trainer``) start the trainer CLI."""

from fastsac_trainer.cli import command

if __name__ == "__main__":
    command()
