"""Lets ``uv run apps/trainer ...`` (and ``python apps/trainer``) start the trainer CLI."""

from fastsac_trainer.cli import main

if __name__ == "__main__":
    main()
