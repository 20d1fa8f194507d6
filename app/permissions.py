"""What this browser session may do: `control` (launch, steer, stop, guards) or `read` (browse, query,
compare). The gate (`app/gate.py`) sets the role in a header on the session's websocket; served on
127.0.0.1 without a gate's token the session has control, as before. Every action that changes
something asks `allowed(...)` at the moment it acts, not only when the button is drawn: a read-only
session that sends a control anyway (a forged websocket message, a disabled button triggered) is
refused, shown why, and recorded as an event in the store."""

from __future__ import annotations

import functools
import os
import re

import streamlit as st

from workbench.access import ENV, ROLE_HEADER, Gate

CONTROL_WIDGET = re.compile(
    r"(_pause|_resume|_stop|playground_go)$|_ack_|FormSubmitter:(runs_launch-Validate and launch|live_budget_form-|live_lr_form-"
    r"|live_alloc_form-|alerts_guard-)")
"""The widgets whose trigger changes something (their keys, inside Streamlit's widget ids): what the
gate refuses from a read-only session's websocket (`app/gate.py`)."""

READ_ONLY_NOTE = ("Read-only access: this token can browse, query and compare; launching, steering, stopping "
                  "and guards need the control token.")


def role() -> str:
    """`control` or `read`. With a gate that asks for tokens and no role header (a session that did not
    come through the gate), `read`: the safe side."""
    try:
        given = st.context.headers.get(ROLE_HEADER)
    except Exception:  # noqa: BLE001 - no request context (AppTest, a bare script run)
        given = None
    if given in ("read", "control"):
        return given
    return "control" if _open_without_token(os.environ.get(ENV)) else "read"


@functools.lru_cache(maxsize=8)
def _open_without_token(settings: str | None) -> bool:
    """Whether the gate's settings (`Gate.to_env`) let a session in without a token; parsed once per
    settings text (every control widget of a page asks for the session's role)."""
    return Gate.from_env(settings).open_without_token


def can_control() -> bool:
    return role() == "control"


def note_if_read_only() -> None:
    """One line saying why the controls below are disabled (nothing for a control session)."""
    if not can_control():
        st.caption(READ_ONLY_NOTE)


def allowed(page: str, what: str, run_id: str | None = None) -> bool:
    """Whether this session may do `what` now; a refusal is shown and recorded as an event (kind
    `control_refused`, on the run, or on the pseudo-run `dashboard` for a launch)."""
    if role() == "control":  # the role itself, not what drew the buttons
        return True
    from app import data

    st.error(f"refused: {what} needs the control token; this session is read-only.", icon=":material/lock:")
    try:
        data.store().add_event(run_id or "dashboard", "warning", "control_refused",
                               f"a read-only dashboard session sent {what} from the {page} page; refused",
                               data={"page": page, "action": what})
    except Exception as exc:  # noqa: BLE001 - the refusal stands even if the store cannot record it
        print(f"gate: could not record a refused {what}: {exc}", flush=True)
    print(f"gate: refused {what} from a read-only session ({page} page)", flush=True)
    return False
