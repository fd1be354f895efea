"""What instance-hours and lost GPU-minutes cost: the price table `gpuwarden simulate` names
(`prices.yaml` beside this module, or `--prices FILE`), with its date and where each price comes
from (docs/simulate.md#prices)."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

BUILTIN_PRICES = Path(__file__).with_name("prices.yaml")
SECONDS_PER_HOUR = 3600.0


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InstancePrice(_Model):
    """USD per instance-hour."""

    on_demand: float = Field(gt=0)
    spot: float = Field(gt=0)
    #: a Capacity Block's effective hourly rate; None: valued at `on_demand`
    capacity_block: float | None = Field(default=None, gt=0)


class PriceTable(_Model):
    as_of: date
    currency: Literal["USD"] = "USD"
    #: where each column comes from (on_demand, spot, capacity_block)
    sources: dict[str, str] = Field(default_factory=dict)
    instance_types: dict[str, InstancePrice]

    def hourly(self, instance_type: str, capacity_type: str) -> float:
        """USD per instance-hour of `instance_type` bought as `capacity_type` (the NodePool's)."""
        price = self.instance_types[instance_type]
        if capacity_type == "spot":
            return price.spot
        if capacity_type == "reserved":
            return price.capacity_block or price.on_demand
        return price.on_demand

    def missing(self, instance_types: set[str]) -> list[str]:
        return sorted(instance_types - set(self.instance_types))

    def named(self) -> str:
        """One line naming the table: its date and each column's source, shortened."""
        return f"prices as of {self.as_of.isoformat()} ({self.currency} per instance-hour, Linux)"


def load_prices(path: Path | None = None) -> PriceTable:
    """The table in `path` (YAML or JSON), or the built-in one; ValidationError / ValueError when it
    does not validate."""
    doc = yaml.safe_load((path or BUILTIN_PRICES).read_text(encoding="utf-8"))
    if not isinstance(doc, dict):
        raise ValueError(f"{path or BUILTIN_PRICES}: a price table is a mapping")
    return PriceTable.model_validate(doc)
