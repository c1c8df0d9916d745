"""The harness's exception hierarchy: each error names the operation that failed.

May import: nothing of the harness (every layer raises these).
"""

from __future__ import annotations

import json


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


class ApiError(ClusterError):
    """The API server answered with an error status (4xx/5xx); `status` says which."""

    def __init__(self, status: int, reason: str, body: bytes | str | None) -> None:
        super().__init__(f"HTTP {status} {reason}")
        self.status = status
        self.reason = reason
        self.body = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")

    @property
    def message(self) -> str:
        """The API server's own explanation (the Status object's message), else the HTTP reason."""
        try:
            return json.loads(self.body).get("message") or self.reason
        except (ValueError, AttributeError):
            return self.reason


class UnrecognisedLog(HarnessError):
    """A workload's logs hold no metric format the harness knows."""


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
