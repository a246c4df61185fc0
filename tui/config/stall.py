"""hosts.yaml `stall:`: when the supervisor calls a running job stalled (tui/supervisor/stall.py).

    stall:
      enabled: true    # check every running job on every supervisor pass
      factor: 3        # no new step for factor × the median step time …
      min_s: 600       # … and never less than this many seconds
      startup_s: 1800  # the first step may take this long after the job started
      retry: false     # a stall stops the job and resubmits it (within its retries:)

A profile may override any of them in its own `stall:` block (the keys it names win).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MAX_SECONDS = 30 * 86400.0  # a month: anything longer is a typo, not a threshold


class StallOptions(BaseModel):
    """The thresholds, every default resolved."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    factor: float = Field(default=3.0, ge=1.0, le=1000.0, description="× the median step time")
    min_s: float = Field(default=600.0, gt=0, le=MAX_SECONDS, description="the floor, seconds")
    startup_s: float = Field(
        default=1800.0, gt=0, le=MAX_SECONDS, description="allowance for the first step, seconds"
    )
    retry: bool = Field(default=False, description="stop and resubmit a stalled job (retries:)")

    def merged(self, override: StallOverride | None) -> StallOptions:
        """These options with the keys `override` names replaced."""
        if override is None:
            return self
        given = {k: v for k, v in override.model_dump().items() if v is not None}
        return self.model_copy(update=given) if given else self

    def to_json(self) -> dict[str, Any]:
        return self.model_dump()


class StallOverride(BaseModel):
    """A profile's `stall:` block: the same keys, each optional (the cluster's where left out)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool | None = None
    factor: float | None = Field(default=None, ge=1.0, le=1000.0)
    min_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    startup_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    retry: bool | None = None
