"""The harness's exception hierarchy: each error names the operation that failed."""

from __future__ import annotations


class HarnessError(Exception):
    """A failure of the harness or the infrastructure (reported as a JUnit <error>)."""


class UsageError(HarnessError):
    """The command line is malformed (exit 2, nothing created)."""


class ConfigError(HarnessError):
    """A setting is malformed or contradicts the cluster (exit 2, nothing created)."""

    @classmethod
    def bad_value(cls, setting: str, value: str, expected: str) -> ConfigError:
        return cls(f"{setting}={value!r} is invalid: expected {expected}")


class RenderError(HarnessError):
    """A manifest template cannot be rendered (unknown or missing field, bad YAML)."""


class ClusterError(HarnessError):
    """An API request failed for a reason retrying does not fix (forbidden, invalid, unreachable)."""


class TestFailure(Exception):
    """The system under test misbehaved: the test failed (JUnit <failure>, exit 1)."""

    __test__ = False  # not a pytest test class


class JobFailed(TestFailure):
    """A workload job or one of its pods failed; `pod` names the pod to blame, if any."""

    def __init__(self, message: str, pod: str | None = None) -> None:
        super().__init__(message)
        self.pod = pod


class WaitTimeout(TestFailure):
    """A wait ran out of time; the message starts with TIMEOUT so CI can tell timeouts apart."""

    def __init__(self, message: str) -> None:
        super().__init__(message if message.startswith("TIMEOUT") else f"TIMEOUT: {message}")


class Interrupted(TestFailure):
    """The run was cancelled (SIGTERM/SIGINT or -test.timeout) while the test was running."""


class ThresholdMissed(TestFailure):
    """A measured metric is below what the hardware should deliver."""


class SkipTest(Exception):
    """The test does not apply to this cluster or configuration (JUnit <skipped>)."""
