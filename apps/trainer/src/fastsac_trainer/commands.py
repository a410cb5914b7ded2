"""The subcommands' command lines: ``trainer eval|export|plot``, their options, help texts and parsing.

One record per subcommand (:data:`COMMANDS`) says what it takes; ``trainer <command> --help`` prints
it, and the command's module (``evaluate``, ``export``, ``plot``) parses its arguments with
:func:`parse`. Nothing here imports more than the standard library and the app's error class, so
the help, a mistyped command and a malformed argument answer at once, without loading torch.
"""

from __future__ import annotations

import difflib
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field

from fastsac_trainer.config.exceptions import TrainerAppError

__all__ = ["COMMANDS", "Command", "Option", "Parsed", "command_help", "parse", "parse_int", "unknown_command"]

HELP_FLAGS = ("-h", "--help")
"""Arguments that ask a subcommand for its help."""


@dataclass(frozen=True)
class Option:
    """One ``key=VALUE`` argument of a subcommand."""

    key: str
    """The key (``checkpoint``)."""
    value: str
    """What the value is, in the usage line (``PATH``)."""
    help: str
    """What it does, with its default."""
    required: bool = False
    """The command cannot run without it."""


@dataclass(frozen=True, kw_only=True)
class Command:
    """A subcommand's command line: what it does, its arguments and an example."""

    name: str
    """The word after ``trainer`` (``eval``)."""
    brief: str
    """What it does, in a few words (``trainer --help`` lists it)."""
    summary: str
    """What it does, in a sentence or two."""
    options: tuple[Option, ...]
    """Its ``key=VALUE`` arguments."""
    examples: tuple[str, ...]
    """Command lines that work as written (given a run folder of that name)."""
    positional: Option | None = None
    """The plain arguments it takes (``plot``'s run folders), if any; each is one value."""
    keys: frozenset[str] = field(init=False)
    """The option keys."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", frozenset(o.key for o in self.options))

    def usage(self) -> str:
        """``trainer eval checkpoint=PATH [episodes=N] ...``: every argument."""
        return " ".join(self._words(self.options))

    def short_usage(self) -> str:
        """``trainer eval checkpoint=PATH ...``: the required arguments only."""
        required = tuple(o for o in self.options if o.required)
        return " ".join(self._words(required)) + (" ..." if len(required) < len(self.options) else "")

    def _words(self, options: Sequence[Option]) -> list[str]:
        words = [f"trainer {self.name}"]
        if self.positional is not None:
            words.append(f"{self.positional.value} [{self.positional.value} ...]")
        for option in options:
            word = f"{option.key}={option.value}"
            words.append(word if option.required else f"[{word}]")
        return words

    def missing(self, option: Option) -> TrainerAppError:
        """The one line for a required ``option`` that was not given."""
        what = f"no {option.value} given" if option is self.positional else f"{option.key} is missing"
        return TrainerAppError(f"{what}: `{self.examples[0]}`; see `trainer {self.name} --help`")


EVAL = Command(
    name="eval",
    brief="a checkpoint's policy: its mean return (video=true: an MP4)",
    summary=(
        "Run a checkpoint's deterministic policy (the squashed mean action) for N episodes and print the "
        "mean return, with its std, min, max and the mean episode length. The env is the run's (its "
        "config.yaml), or task=NAME's; task.* options change its settings (over task=gym's for a "
        "checkpoint without its run folder). video=true also records one episode."
    ),
    options=(
        Option("checkpoint", "PATH", "a checkpoint file, or a run folder (its latest checkpoint)", True),
        Option("episodes", "N", "episodes to run, each on an env of its own (default 10)"),
        Option("seed", "S", "seed of the envs (default 0)"),
        Option(
            "task", "NAME", "whose env to run, for a checkpoint without its run folder (default: the run's)"
        ),
        *(
            Option(f"task.{key}", value, what)
            for key, value, what in (
                ("env_id", "ID", "the gymnasium id of your env"),
                ("env_import", "MODULE", "the module whose import registers it"),
                ("env_factory", "MOD:FN", "your batched env's factory"),
                ("env_kwargs", "{k:v}", "keyword arguments of the env"),
                ("max_episode_steps", "N", "its time limit"),
            )
        ),
        Option("device", "DEV", "cpu or cuda[:N] (default cpu)"),
        Option("video", "true", "also write an MP4 of one episode (needs offscreen OpenGL)"),
        Option(
            "video_out",
            "FILE",
            "the video file, .mp4 or .gif (default: the run folder's videos/<checkpoint>.mp4)",
        ),
        Option("video_steps", "N", "most steps of the video (default 1000)"),
    ),
    examples=(
        "trainer eval checkpoint=runs/hopper-20261203-101500",
        "trainer eval checkpoint=runs/hopper-20261203-101500 episodes=20 seed=1 video=true",
        "trainer eval checkpoint=model.pt task.env_id=MyArm-v0 task.env_import=my_package.envs",
    ),
)

EXPORT = Command(
    name="export",
    brief="the policy for deployment (ONNX)",
    summary=(
        "Write a checkpoint's deterministic policy for deployment: an ONNX graph from raw observations "
        "to actions within the bounds (the observation normalizer folded in), and a FILE.json sidecar."
    ),
    options=(
        Option("checkpoint", "PATH", "a checkpoint file, or a run folder (its latest checkpoint)", True),
        Option("format", "onnx", "the file format (onnx, the only one)"),
        Option("out", "FILE", "the file to write (default: the checkpoint's path with .onnx)"),
    ),
    examples=(
        "trainer export checkpoint=runs/hopper-20261203-101500",
        "trainer export checkpoint=runs/hopper-20261203-101500 out=hopper.onnx",
    ),
)

PLOT = Command(
    name="plot",
    brief="an image of the runs' returns (seeds: mean, spread)",
    summary=(
        "Draw the runs' training returns (and eval/return) against wall-clock time and env steps, from "
        "their TensorBoard events, into one image; the seeds of one seed= list as mean and spread."
    ),
    positional=Option("RUN", "RUN", "a run folder (runs/<run>); several are overlaid", True),
    options=(Option("out", "FILE", "the image, .png, .pdf, .svg ... (default: RUN/returns.png)"),),
    examples=("trainer plot runs/hopper-20261203-101500", "trainer plot runs/h1_s* out=h1.svg"),
)

COMMANDS = {command.name: command for command in (EVAL, EXPORT, PLOT)}
"""Every subcommand, by name."""


def command_help(name: str) -> str:
    """The text of ``trainer <name> --help``."""
    command = COMMANDS[name]
    listed = ([] if command.positional is None else [command.positional]) + list(command.options)
    width = max(len(_shown(o)) for o in listed) + 2
    rows = "\n".join(f"  {_shown(o):<{width}}{o.help}{'; required' if o.required else ''}" for o in listed)
    examples = "\n".join(f"  {example}" for example in command.examples)
    usage = textwrap.fill(command.usage(), width=100, subsequent_indent=" " * len(f"usage: trainer {name} "))
    return (
        f"usage: {usage}\n\n{textwrap.fill(command.summary, width=100)}\n\narguments:\n{rows}\n\n"
        f"examples:\n{examples}\n\nGuide: wiki/trainer.md\n"
    )


def _shown(option: Option) -> str:
    return option.value if option.key == option.value else f"{option.key}={option.value}"


@dataclass(frozen=True)
class Parsed:
    """A subcommand's arguments: its ``key=value`` options and its plain arguments."""

    options: dict[str, str]
    """Each option given, by key (the last one wins)."""
    positional: list[str]
    """The plain arguments, in order."""


def parse(args: Sequence[str], command: Command) -> Parsed:
    """``args`` of ``command``, checked against its options.

    Raises:
        TrainerAppError: A flag, a plain argument the command does not take, an unknown key, or a
            required option missing (one line naming it and the fix).
    """
    options: dict[str, str] = {}
    positional: list[str] = []
    see = f"see `trainer {command.name} --help`"
    for arg in args:
        key, eq, value = arg.partition("=")
        if arg.startswith("-"):
            raise TrainerAppError(f"{key} is not an option of `trainer {command.name}`; {see}")
        if not eq:
            if command.positional is None:
                raise TrainerAppError(
                    f"malformed argument {arg!r} for `trainer {command.name}`; write key=value ({see})"
                )
            positional.append(arg)
            continue
        if key not in command.keys:
            near = difflib.get_close_matches(key, sorted(command.keys), n=1)
            guess = f"did you mean {near[0]}=? " if near else ""
            raise TrainerAppError(
                f"{key}={value!r} is not an option of `trainer {command.name}`; {guess}"
                f"its options: {', '.join(o.key for o in command.options)} ({see})"
            )
        options[key] = value
    for option in command.options:
        if option.required and option.key not in options:
            raise command.missing(option)
    if command.positional is not None and not positional:
        raise command.missing(command.positional)
    return Parsed(options, positional)


def parse_int(setting: str, value: str, minimum: int) -> int:
    """``value`` as an int of at least ``minimum``.

    Raises:
        TrainerAppError: It is not an integer, or it is below ``minimum``.
    """
    try:
        number = int(value)
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise TrainerAppError(f"{setting}={value!r} is invalid: use an integer of at least {minimum}")
    return number


def unknown_command(word: str) -> TrainerAppError:
    """The one line for a first argument that is neither a command nor a ``key=value`` override."""
    near = difflib.get_close_matches(word, sorted(COMMANDS), n=1, cutoff=0.5)
    guess = f"did you mean `trainer {near[0]}`? " if near else ""
    return TrainerAppError(
        f"{word!r} is not a command; {guess}the commands are {', '.join(COMMANDS)}, and training takes "
        "key=value overrides (`trainer --help`)"
    )
