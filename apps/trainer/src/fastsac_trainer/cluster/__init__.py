"""One run on several hosts, launched by torchrun: this host's part in it.

:func:`join_cluster` reads the launch context (:mod:`fastsac_trainer.cluster.context`) and, when torchrun
started the trainer on two hosts or more, connects to the run's store. The :class:`Cluster` then
makes the hosts agree before anything starts (:mod:`fastsac_trainer.cluster.agree`), lets host 0 choose
the run folder (the others keep their own logs in ``<run folder>/host<R>/``), beats and watches the
other hosts' heartbeats (:mod:`fastsac_trainer.cluster.watch`), and turns a lost host into one line that
names it. The learners' side is ``fastsac_async.hosts`` (Note [learners across hosts]).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from fastsac_async import HostGroup, open_store
from fastsac_trainer.cluster.agree import HostRecord, check_agreement, host_record, render_hosts
from fastsac_trainer.cluster.context import LaunchContext, launch_context
from fastsac_trainer.cluster.watch import HostLostError, HostWatch
from fastsac_trainer.config.exceptions import TrainerAppError

__all__ = ["Cluster", "HostLostError", "LaunchContext", "join_cluster", "launch_context"]

_log = logging.getLogger(__name__)

AGREE_TIMEOUT_S = 180.0
"""Longest wait for every host's record, and for host 0's run folder."""
_CLIENT_TIMEOUT_S = 10.0
"""Longest wait of one store operation of the heartbeat watch."""


class Cluster:
    """This host's part in a run across hosts.

    Args:
        launch: torchrun's context of this host.
    """

    def __init__(self, launch: LaunchContext) -> None:
        self.launch = launch
        self.group: HostGroup = launch.host_group()
        self.address = f"{launch.store_host}:{launch.store_port}"
        try:
            self._store = open_store(self.group, AGREE_TIMEOUT_S, serve=self.group.serve_store)
        except Exception as error:
            raise TrainerAppError(
                f"host {launch.host_rank}: the run's store at {self.address} (MASTER_ADDR:MASTER_PORT) is "
                f"unreachable ({error}); check that every host reaches host 0 there"
            ) from None
        self._published = False
        self._watch: HostWatch | None = None

    @property
    def host(self) -> int:
        """This host's rank."""
        return self.group.host_rank

    def _publish(self, record: HostRecord) -> None:
        self._store.set(f"host/{self.host}", record.to_json())
        self._published = True

    def _wait(self, keys: list[str], what: str) -> None:
        try:
            self._store.wait(keys, timedelta(seconds=AGREE_TIMEOUT_S))
        except Exception:
            missing = [k for k in keys if not self._store.check([k])]
            raise TrainerAppError(
                f"{what} did not arrive within {AGREE_TIMEOUT_S:.0f} s (missing {', '.join(missing)}); "
                "start the trainer on every host of the torchrun launch"
            ) from None

    def agree(self, run: Any, topology: Any, resumed_at: int | None) -> str:
        """Publish this host's record, check every host's; the whole run, rendered for the console.

        Raises:
            TrainerAppError: Hosts disagree, or one failed to start (the line names it).
        """
        self._publish(host_record(self.host, run, topology, resumed_at))
        keys = [f"host/{h}" for h in range(self.group.num_hosts)]
        self._wait(keys, "the other hosts' settings")
        records = [HostRecord.from_json(self._store.get(k)) for k in keys]
        check_agreement(records)
        return render_hosts(records, self.host, self.address)

    def failed_to_start(self, line: str) -> None:
        """Tell the other hosts this host stopped with ``line`` before it could agree (they stop too)."""
        with contextlib.suppress(Exception):
            if not self._published:
                self._publish(HostRecord.failed(self.host, line))
            elif self.group.primary and not self._store.check(["run_dir"]):
                self._store.set("run_dir", json.dumps({"error": line}))

    def run_folder(self, make_primary: Callable[[], Path], config_yaml: str, resuming: bool) -> Path:
        """Host 0's run folder (``make_primary`` creates it), or ``<that folder>/host<R>/`` on host R.

        On a filesystem every host shares, the other hosts' folders land inside the run's folder.
        """
        from fastsac_async import RunLayout
        from fastsac_trainer.run_dir import create_run_dir

        if self.group.primary:
            run_dir = make_primary()
            self._store.set("run_dir", json.dumps({"path": str(run_dir.resolve())}))
            return run_dir
        self._wait(["run_dir"], "host 0's run folder")
        shared = json.loads(self._store.get("run_dir"))
        if "error" in shared:
            raise TrainerAppError(f"host 0 could not start: {shared['error']}")
        own = RunLayout(Path(shared["path"])).host(self.host).root
        return create_run_dir(own.parent, own.name, config_yaml, resuming=resuming and own.is_dir())

    def start_watch(self) -> None:
        """Start beating and watching the other hosts (Note [host heartbeats])."""
        connect = functools.partial(open_store, self.group, _CLIENT_TIMEOUT_S, suffix="")
        store = (self.launch.store_host, self.launch.store_port)
        self._watch = HostWatch(connect, host=self.host, num_hosts=self.group.num_hosts, store=store)
        self._watch.start()

    def guard(self, trainer_fn: Callable[..., object]) -> Callable[..., object]:
        """``trainer_fn`` that also stops at once on a lost host and then raises :class:`HostLostError`."""
        watch = self._watch
        assert watch is not None, "start_watch() first"

        def guarded(*args: Any, should_abort: Callable[[], bool], **kwargs: Any) -> object:
            def abort() -> bool:
                return should_abort() or watch.lost is not None

            try:
                return trainer_fn(*args, should_abort=abort, **kwargs)
            except BaseException as error:
                if should_abort():  # the user stopped it at once: theirs is the cause
                    raise
                watch.failed(f"{type(error).__name__}: {error}".splitlines()[0])
                lost = watch.verdict(watch.lost_after_s + 2.0, should_give_up=should_abort)
                if lost is not None:
                    cause = type(error).__name__
                    raise HostLostError(f"{lost}; host {self.host} stopped ({cause})") from error
                raise

        return guarded

    def close(self) -> None:
        """Stop the heartbeat (a host that did not fail says it is done)."""
        if self._watch is not None:
            self._watch.close()


@contextlib.contextmanager
def join_cluster() -> Iterator[Cluster | None]:
    """This host's :class:`Cluster` under a torchrun launch of two hosts or more, else None.

    A :class:`TrainerAppError` inside (a bad setting, a disagreement) is told to the other hosts
    first, so every host stops with a line that names it.
    """
    launch = launch_context()
    if launch is None or launch.num_hosts == 1:
        yield None
        return
    cluster = Cluster(launch)
    try:
        yield cluster
    except TrainerAppError as error:
        cluster.failed_to_start(str(error))
        raise
    finally:
        cluster.close()
