"""``python -m trainer ...``: the trainer command line."""

from trainer.cli import main

if __name__ == "__main__":
    main()
