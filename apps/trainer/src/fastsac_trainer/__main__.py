"""``python -m fastsac_trainer ...``: the trainer command line."""

from fastsac_trainer.cli import command

if __name__ == "__main__":
    command()
