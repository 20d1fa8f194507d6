"""Runs: every run in the store with its status and headline numbers; pause, resume or stop one;
launch a new run from a config file with field overrides (validated before anything starts: the
config must lie in the configs directory, overrides may name only known config fields)."""

from pathlib import Path

import streamlit as st

from app import components, data, permissions
from workbench.errors import StoreUnreachable

PAGE = "runs"
CONFIG_DIRS = [Path.cwd() / "configs", Path(__file__).resolve().parents[2] / "configs"]
# The only places the launch form takes configs from (checked again on submit, resolved).
MAX_NAME = 120

st.title("Runs")
st.caption(f"store: {data.shown_location()}")
components.outage_banner()

try:
    table = data.run_table()
except StoreUnreachable as exc:  # what the runs say (above) is all there is to show
    st.error(str(exc))
    st.stop()
if table.is_empty():
    st.info("No runs in this store yet.")
else:
    st.dataframe(
        table,
        hide_index=True,
        key=f"{PAGE}_table",
        column_config={
            "best_pass1": st.column_config.NumberColumn("best held-out pass@1", format="%.3f"),
            "tokens": st.column_config.NumberColumn("generated tokens", format="%d"),
            "wall_time_s": st.column_config.NumberColumn("wall time (s)", format="%.1f"),
            "train_time_s": st.column_config.NumberColumn(
                "time in steps (s)", format="%.1f",
                help="The steps' own time summed, evaluations included; the wall time also counts set-up "
                     "and pauses"),
        },
    )

    st.subheader("Control a run")
    run_id = components.pick_run(PAGE)
    if run_id:
        info = data.run(run_id)
        status = info.get("status")
        st.text(f"status: {status}")
        if info.get("error"):
            st.error(str(info["error"]))
        components.lifecycle_buttons(PAGE, run_id, status)

st.subheader("Launch a run")
# the default experiment first (what `make demo` runs), then the others by name
configs = sorted({p.resolve() for d in CONFIG_DIRS if d.is_dir() for p in d.glob("*.toml")},
                 key=lambda p: (p.name != "organism.toml", p.name))
if not configs:
    st.info("No config files found in configs/.")
else:
    with st.form(f"{PAGE}_launch"):
        cfg_path = st.selectbox("config", configs, format_func=lambda p: p.name, key=f"{PAGE}_config")
        name = st.text_input("run name (optional)", key=f"{PAGE}_name")
        overrides_text = st.text_area(
            "overrides, one `field=value` per line",
            placeholder="steps=50\noptim.lr=5e-5\nallocator.name=multistage",
            key=f"{PAGE}_overrides",
        )
        b1, b2 = st.columns(2)
        check = b1.form_submit_button("Validate", icon=":material/check:")
        submitted = b2.form_submit_button("Validate and launch", icon=":material/rocket_launch:",
                                          disabled=not permissions.can_control())
    permissions.note_if_read_only()
    if submitted and not permissions.allowed(PAGE, "launch"):
        pass  # refused, shown and recorded
    elif check or submitted:
        from workbench.control import launch
        from workbench.config import config_warnings
        from workbench.control.launch import check_config_path, check_overrides, resolve_config
        from workbench.errors import ControlError, WorkbenchError

        overrides = [line.strip() for line in overrides_text.splitlines() if line.strip()]
        try:  # launch validates the config and the overrides before it creates or starts anything
            # only configs inside the configs directory, only known fields (no code named in the form)
            cfg_file = check_config_path(cfg_path, CONFIG_DIRS)
            overrides = check_overrides(overrides)
            if len(name) > MAX_NAME or any(not ch.isprintable() for ch in name):
                raise ControlError(f"launch: run name must be at most {MAX_NAME} printable characters")
            if submitted:
                run_id = launch(str(cfg_file), store=data.store(), overrides=overrides, name=name or None)
            else:
                resolved = resolve_config(str(cfg_file), overrides, name=name or None)
        except WorkbenchError as exc:
            st.error(str(exc), icon=":material/block:")
        else:
            if submitted:
                st.success(f"launched run {run_id}")
                data.runs.clear()
                data.run_table.clear()
            else:
                st.success("valid")
                for said in config_warnings(resolved):  # valid, with what it cannot promise
                    st.warning(said, icon=":material/warning:")
                st.json(resolved.to_dict(), expanded=False)
