"""The `[[guards]]` tables of a run config, and the resolved `Guard` the engine evaluates.

    [[guards]]
    preset = "entropy_collapse"      # the preset's rule and window ...
    action = "rollback"              # ... with another action
    settings = { temperature = 0.7 } # applied when the run goes on from the checkpoint

    [[guards]]
    name = "loss_spike"
    rule = "train/loss > 5 * mean(train/loss, 10)"
    window = 2

    [[guards]]
    preset = "zero_signal"
    enabled = false                  # turns a default preset off
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from typing import Any

from workbench.checks import check, require
from workbench.guards.presets import DEFAULT, PRESETS
from workbench.guards.rules import metric_names, parse_rule
from workbench.metrics import RULE_METRICS, rule_metric

ACTIONS = ("alert", "pause", "rollback", "stop")
"""What a guard does when its rule holds for its window."""

SETTINGS = {"temperature": "set_temperature", "budget": "set_budget", "lr": "set_lr"}
"""Settings a rollback may change, and the control command that changes each (recorded like any other)."""


def setting_command(key: str, value: Any, budget_kind: str = "rollouts") -> tuple[str, dict[str, Any]]:
    """The control command (name, args) that changes one rollback setting to `value`."""
    if key == "budget":
        return SETTINGS[key], {"kind": budget_kind, "amount": int(value)}
    return SETTINGS[key], {key: float(value)}

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}$")
_NAME_RULE = "letters, digits and _.-, at most 64"


@dataclass(frozen=True)
class GuardConfig:
    name: str = ""
    """The guard's name (letters, digits, `_.-`); empty: the preset's name. A guard named like a default
    preset replaces it."""
    preset: str = ""
    """A preset by name (nan, entropy_collapse, entropy_blowup, length_blowup, reward_collapse,
    truncation, degenerate_text, reward_hacking, zero_signal, tool_errors, turn_limit; see docs/guards.md);
    the fields set here override its rule, window and action."""
    rule: str = ""
    """A one-line condition over step metrics or the step's rollouts, e.g.
    "rollout/entropy_mean < 0.5 * baseline(rollout/entropy_mean, 10)" (grammar in docs/guards.md)."""
    window: int = 0
    """Consecutive steps the rule must hold before the guard acts (0: the preset's, else 1)."""
    action: str = ""
    """"alert", "pause", "rollback" (to the last checkpoint before the rule first held, then on) or
    "stop"; empty: the preset's, else "alert"."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Rollback only: settings changed when the run goes on from the checkpoint (temperature, budget,
    lr)."""
    enabled: bool = True
    """false turns the guard (e.g. a default preset of the same name) off."""

    def __post_init__(self) -> None:
        check(not self.preset or self.preset in PRESETS, "guards.preset", f"one of {', '.join(PRESETS)}", self.preset)
        require(bool(self.preset or self.rule), "guards.rule",
                "missing (write a rule, or name a preset with guards.preset)")
        require(bool(self.preset or self.name), "guards.name", "missing (a guard with its own rule needs a name)")
        check(self.window >= 0, "guards.window", "an integer >= 1; 0: the preset's", self.window)
        check(not self.action or self.action in ACTIONS, "guards.action", f"one of {', '.join(ACTIONS)}", self.action)
        check(not self.name or bool(_NAME.match(self.name)), "guards.name", _NAME_RULE, self.name)
        self.resolve()  # rule syntax, settings

    def resolve(self) -> "Guard":
        """The guard this entry describes (preset filled in)."""
        p = PRESETS.get(self.preset)
        return Guard(name=self.name or self.preset, rule=self.rule or (p.rule if p else ""),
                     window=self.window or (p.window if p else 1),
                     action=self.action or (p.action if p else "alert"), settings=dict(self.settings),
                     hint=p.hint if p else "", enabled=self.enabled)


@dataclass(frozen=True)
class Guard:
    """A resolved guard: rule + window + action (+ the settings a rollback changes)."""

    name: str
    rule: str
    window: int = 1
    action: str = "alert"
    settings: dict[str, Any] = field(default_factory=dict)
    hint: str = ""
    enabled: bool = True

    def __post_init__(self) -> None:
        check(bool(self.name) and bool(_NAME.match(self.name)), "guards.name", _NAME_RULE, self.name)
        check(not isinstance(self.window, bool) and isinstance(self.window, int) and self.window >= 1,
              "guards.window", "an integer >= 1", self.window)
        check(self.action in ACTIONS, "guards.action", f"one of {', '.join(ACTIONS)}", self.action)
        require(not self.settings or self.action == "rollback", "guards.settings",
                "only a rollback changes settings (set action = \"rollback\")")
        for key, value in self.settings.items():
            require(key in SETTINGS, f"guards.settings.{key}", f"unknown setting (allowed: {', '.join(SETTINGS)})")
            ok = (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
                  and value > 0 and (key != "budget" or float(value).is_integer()))
            check(ok, f"guards.settings.{key}", "an integer >= 1" if key == "budget" else "a number > 0", value)
        object.__setattr__(self, "tree", parse_rule(self.rule))

    def check_metrics(self, recorded: set[str] | frozenset[str] = frozenset()) -> None:
        """ConfigError naming the first metric the rule reads that is neither in the catalogue
        (`workbench/metrics.py`) nor in `recorded` (what the run has recorded)."""
        reads = metric_names(self.tree)  # type: ignore[attr-defined]
        unknown = sorted(m for m in reads if not rule_metric(m) and m not in recorded)
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(RULE_METRICS | set(recorded)), n=3)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            require(False, f"guards.rule {self.rule!r}", f"unknown metric {unknown[0]!r} ({hint}the metrics "
                    "a rule may read are listed in docs/metrics.md, `workbench metrics`)")

    def to_dict(self) -> dict[str, Any]:
        return dict(name=self.name, rule=self.rule, window=self.window, action=self.action,
                    settings=dict(self.settings), hint=self.hint, enabled=self.enabled)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Guard":
        return cls(name=d["name"], rule=d["rule"], window=int(d.get("window", 1)),
                   action=d.get("action", "alert"), settings=dict(d.get("settings") or {}),
                   hint=d.get("hint", ""), enabled=bool(d.get("enabled", True)))


def guard_set(entries: tuple[GuardConfig, ...] | list[GuardConfig], *,
              check_metrics: bool = False) -> dict[str, Guard]:
    """The guards of a run: the default presets, then the config's entries (same name replaces);
    disabled ones left out. ConfigError on two entries of one name (and, with `check_metrics`, on a
    rule reading a metric the engine does not record)."""
    out = {name: GuardConfig(preset=name).resolve() for name in DEFAULT}
    seen: set[str] = set()
    for e in entries:
        g = e.resolve()
        require(g.name not in seen, "guards.name", f"{g.name!r} appears twice (each guard needs its own name)")
        seen.add(g.name)
        if check_metrics and g.enabled:
            g.check_metrics()
        out[g.name] = g
    return {k: g for k, g in out.items() if g.enabled}
