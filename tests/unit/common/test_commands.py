"""``run_bounded``: an external command's answer, its refusal, its silence, and a missing one."""

from __future__ import annotations

import os
import sys
import time

import pytest

from lockstep_common.commands import NoAnswer, run_bounded

pytestmark = pytest.mark.unit
ENV = dict(os.environ)


async def test_output_and_a_one_line_error_come_back_with_the_exit_code() -> None:
    code = "import sys; print('gpu001'); sys.stderr.write('bad  node\\n  name'); sys.exit(1)"
    done = await run_bounded(sys.executable, ["-c", code], env=ENV, timeout_s=30, max_output=100)
    assert (done.returncode, done.out, done.error) == (1, "gpu001\n", "bad node name")


async def test_output_is_cut_at_its_limit() -> None:
    code = "print('x' * 1000)"
    done = await run_bounded(sys.executable, ["-c", code], env=ENV, timeout_s=30, max_output=10)
    assert done.out == "x" * 10


async def test_a_command_that_does_not_answer_is_killed_at_its_deadline() -> None:
    started = time.monotonic()
    with pytest.raises(NoAnswer, match=r"no answer within 0\.5s"):
        await run_bounded(
            sys.executable, ["-c", "import time; time.sleep(60)"], env=ENV, timeout_s=0.5,
            max_output=10,
        )  # fmt: skip
    assert time.monotonic() - started < 30  # killed, not waited for


async def test_a_missing_program_is_an_os_error() -> None:
    with pytest.raises(OSError):
        await run_bounded("/nonexistent/scontrol", [], env=ENV, timeout_s=5, max_output=10)
