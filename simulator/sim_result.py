"""What a simulation returns, :class:`SimResult` (its request and step tables, summary and
notes), and the result folder it is written as (requests.parquet, steps.parquet, summary.json,
config.toml), keyed by :func:`config_identity` so that reruns of a config replace each other.

Apart from the run (simulator.run, which builds it) because the result and its folder are what
callers keep: ``simulate --out`` checks a folder against a config's identity before running.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specbatch.io import result_dir, write_json
from specbatch.simulator.config.sim_config import SimConfig
from specbatch.simulator.config.toml_writer import to_toml
from specbatch.simulator.metrics import FrameField

if TYPE_CHECKING:
    import pandas as pd

    from specbatch.simulator.cost.interface import CostModel


@dataclass(frozen=True, eq=False)
class SimResult:
    """Tables and summary of one run (definitions: simulator.metrics). The step table is
    held (``step_table``) or, for a run streamed to a folder (:func:`simulate_to`), in
    ``steps_file``; :attr:`steps` gives it either way. The run hands its tables over as
    columns (simulator.metrics.Columns); ``requests`` and ``step_table`` read as DataFrames,
    built on first read (simulator.metrics.FrameField), so a caller of the summary alone
    never imports pandas."""

    config: SimConfig
    requests: pd.DataFrame = FrameField()
    step_table: pd.DataFrame | None = FrameField()  # None: streamed to steps_file
    summary: dict
    notes: tuple[str, ...] = ()  # what the run did that the config alone does not show
    steps_file: Path | None = None  # the streamed step table's Parquet file
    #: The cost model that priced the run (before CUDA-graph padding), so a caller reporting
    #: its sources (``specbatch simulate``) does not build it a second time.
    cost_model: CostModel | None = dataclasses.field(default=None, repr=False)

    @property
    def steps(self) -> pd.DataFrame:
        """The step table (read from :attr:`steps_file` on each access when streamed)."""
        if self.step_table is not None:
            return self.step_table
        import pandas as pd

        return pd.read_parquet(self.steps_file)

    def write(self, out_dir: str | os.PathLike, force: bool = False) -> Path:
        """Write requests.parquet, steps.parquet, summary.json, config.toml as the result
        folder ``out_dir``, with the checks ``simulate --out`` applies
        (specbatch.io.result_dir): ``out_dir`` may be new, empty, or a simulate result of the
        same config (``force``: of any config), and is replaced whole; a trace, another kind
        of result or other files raise :class:`SpecbatchError` naming ``out_dir``."""
        identity = config_identity(self.config)
        with result_dir(out_dir, "simulate", identity, "out_dir", force=force,
                        legacy=RESULT_FILES) as tmp:
            self.write_files(tmp)
        return Path(out_dir)

    def write_files(self, out_dir: str | os.PathLike) -> Path:
        """The four files into the folder ``out_dir`` (created), next to whatever is there:
        for a caller that owns the folder (a result_dir's temporary folder, validate's)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.requests.to_parquet(out / "requests.parquet", index=False)
        if self.step_table is not None:
            self.step_table.to_parquet(out / "steps.parquet", index=False)
        elif Path(self.steps_file).resolve() != (out / "steps.parquet").resolve():
            shutil.copyfile(self.steps_file, out / "steps.parquet")
        write_json(out / "summary.json", self.summary)
        (out / "config.toml").write_text(to_toml(self.config))
        return out


#: The files of a simulate result (an older result without a marker holds only these).
RESULT_FILES = ("requests.parquet", "steps.parquet", "summary.json", "config.toml")


def config_identity(config: SimConfig) -> str:
    """The hash of a run's resolved config: reruns of it may replace each other's results.
    The ``engine`` that runs it is left out: both engines' results are bit-identical."""
    import hashlib

    if config.engine != "auto":
        config = config.replace(engine="auto")
    return hashlib.sha256(to_toml(config).encode()).hexdigest()[:20]
