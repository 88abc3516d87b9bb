"""Report rendering: blocks of text, tables and figures to Markdown or standalone HTML.

A report is a list of blocks ``("h1"|"h2", text)``, ``("p", text)``, ``("list", text)``,
``("table", DataFrame)``, ``("img", file, caption)``; :func:`render` writes them as Markdown or
as one HTML page (inline ``**bold**`` and ```code``` carried over). Numbers are formatted by
:func:`fmt_cell`: throughput and values >= 100 with thousands separators and one decimal,
other floats with three decimals, NaN as "-".
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from specbatch.simulator.config.sim_config import NO_K_POLICIES


def fmt_cell(value, metric: str = "") -> str:
    """One table cell as text (see the module docstring)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value)).lower()
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if metric in ("throughput", "tokens/s") or abs(value) >= 100:
            return f"{value:,.1f}"
        return f"{value:.3f}"
    return str(value)


def context_note(ctx: dict) -> str:
    """``field = value, ...`` of the context a figure was drawn at."""
    return ", ".join(f"{k} = {v}" for k, v in ctx.items())


def table_rows(table: pd.DataFrame) -> list[list[str]]:
    return [
        [fmt_cell(v, c) for c, v in zip(table.columns, row)]
        for row in table.itertuples(index=False)
    ]


def md_table(table: pd.DataFrame) -> str:
    head = "| " + " | ".join(map(str, table.columns)) + " |"
    sep = "|" + "|".join("---" for _ in table.columns) + "|"
    body = ["| " + " | ".join(cells) + " |" for cells in table_rows(table)]
    return "\n".join([head, sep, *body])


def html_table(table: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"
                   for cells in table_rows(table))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def md_inline_to_html(text: str) -> str:
    import re

    text = html.escape(text)
    text = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", text)


def render(blocks: Sequence[tuple], fmt: str) -> str:
    """Blocks: ("h1"|"h2", text), ("p", text), ("list", text), ("table", df), ("img", file, alt)."""
    parts = []
    for kind, *rest in blocks:
        if fmt == "md":
            if kind in ("h1", "h2"):
                parts.append(("# " if kind == "h1" else "## ") + rest[0])
            elif kind in ("p", "list"):
                parts.append(rest[0])
            elif kind == "table":
                parts.append(md_table(rest[0]))
            elif kind == "img":
                parts.append(f"![{rest[1]}]({rest[0]})\n\n*{rest[1]}*")
        else:
            if kind in ("h1", "h2"):
                parts.append(f"<{kind}>{html.escape(rest[0])}</{kind}>")
            elif kind == "p":
                parts.append(f"<p>{md_inline_to_html(rest[0])}</p>")
            elif kind == "list":
                items = [line[2:] for line in rest[0].replace("\n  ", " ").splitlines()
                         if line.startswith("- ")]
                parts.append("<ul>" + "".join(f"<li>{md_inline_to_html(i)}</li>" for i in items)
                             + "</ul>")
            elif kind == "table":
                parts.append(html_table(rest[0]))
            elif kind == "img":
                parts.append(f'<figure><img src="{html.escape(rest[0])}" '
                             f'alt="{html.escape(rest[1])}">'
                             f"<figcaption>{html.escape(rest[1])}</figcaption></figure>")
    if fmt == "md":
        return "\n\n".join(parts) + "\n"
    style = ("body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:"
             "collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
             "img{max-width:100%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>specbatch report</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")


def _ratio_text(mean: float, low: float, high: float, percent: bool) -> str:
    """``1.234x [1.200, 1.250]`` or ``-12.30% [-14.00, -10.60]``; "-" when undefined."""
    if not math.isfinite(mean):
        return "-"
    text = f"{100 * mean:+.2f}%" if percent else f"{mean:.3f}x"
    if math.isfinite(low):
        text += (f" [{100 * low:+.2f}, {100 * high:+.2f}]" if percent
                 else f" [{low:.3f}, {high:.3f}]")
    return text


def headline_display(table: pd.DataFrame, open_load: bool = False) -> pd.DataFrame:
    """The headline table with speedup as ``1.23x [1.20, 1.25]`` and labelled columns.

    ``open_load`` (open-loop arrivals, see analysis.report.compare.ranking_metric): latency first,
    the paired e2e change against ``ar`` instead of the throughput speedup (throughput is
    pinned to the offered rate), and ``served`` (throughput / offered) to show which
    settings keep up.
    """
    out = table.copy()
    out["speedup vs ar"] = [_ratio_text(s, lo, hi, False)
                            for s, lo, hi in zip(out.speedup, out.speedup_low, out.speedup_high)]
    if "e2e_vs_base" in out:
        out["e2e vs ar"] = [_ratio_text(s, lo, hi, True) for s, lo, hi in
                            zip(out.e2e_vs_base, out.e2e_vs_base_low, out.e2e_vs_base_high)]
    if "k" in out:  # ar drafts nothing and DSD plans its own window: their k and e mean nothing
        out["k"] = ["-" if p in NO_K_POLICIES else k for p, k in zip(out.policy, out.k)]
        out["e"] = ["-" if p in NO_K_POLICIES else e for p, e in zip(out.policy, out.e)]
    out = out.drop(columns=[c for c in ("speedup", "speedup_low", "speedup_high", "e2e_vs_base",
                                        "e2e_vs_base_low", "e2e_vs_base_high") if c in out])
    if open_load:
        metrics = ["e2e_mean", "e2e_p99", "tpot_mean", "e2e vs ar", "throughput", "served",
                   "vsr", "mal", "n_seeds"]
    else:
        metrics = ["throughput", "speedup vs ar", "e2e_mean", "e2e_p99", "vsr", "mal",
                   "n_seeds"]
    metrics = [m for m in metrics if m in out]
    dropped = {"tpot_mean", "e2e vs ar", "served", "speedup vs ar"} - set(metrics)
    front = [c for c in out.columns if c not in metrics and c not in dropped]
    out = out[front + metrics]
    return out.rename(columns={"throughput": "throughput (tok/s)", "e2e_mean": "e2e mean (s)",
                               "e2e_p99": "e2e p99 (s)", "tpot_mean": "TPOT (s/token)",
                               "served": "served / offered", "n_seeds": "seeds"})
