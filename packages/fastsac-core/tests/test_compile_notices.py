"""The trainer's console stays free of dynamo's notice about the optimizers' profiler ranges."""

import subprocess
import sys

import pytest

_SCRIPT = """
import logging, sys, torch
seen = []
class Keep(logging.Handler):
    def emit(self, record):
        seen.append(record.getMessage())
logging.getLogger("torch._dynamo.variables.ctx_manager").addHandler(Keep())
if sys.argv[1] == "quiet":
    from fastsac_core._steps import quiet_compile_notices
    quiet_compile_notices()
p = torch.nn.Parameter(torch.ones(3))
opt = torch.optim.AdamW([p], lr=1e-3)
def step():
    (p * p).sum().backward()
    opt.step()
    opt.zero_grad()
torch.compile(step, backend="eager")()
print(sum("Profiler record function" in m for m in seen))
"""


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "expected"), [("loud", "1"), ("quiet", "0")])
def test_profiler_notice_is_dropped_only_when_quieted(mode: str, expected: str) -> None:
    """Compiling an optimizer step logs dynamo's profiler notice; quiet_compile_notices drops it."""
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, timeout=240, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == expected, done.stdout + done.stderr
