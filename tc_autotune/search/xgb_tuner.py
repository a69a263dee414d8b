"""``XGBTuner``, the default search: an XGBoost cost model fitted on everything measured so far --
plus records of other workloads, for transfer learning -- picks the next batch by simulated
annealing (``anneal``) on its predictions; and ``make_tuner``, every tuner by name.  No TVM,
and xgboost only once a model is fitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .anneal import anneal_walk
from .cost_model import (TransferCostModel, XGBCostModel, block_tiles, features_from_positions,
    indices_from_positions, positions_from_configs, positions_from_indices, prior_score, valid_mask)
from ..core.config_space import ConfigSpace
from ..core.results import MeasureResult
from .tuner import _CHUNK, _DRAW_ROUNDS, _SCAN_LIMIT, Config, GridTuner, RandomTuner, Tuner

TUNERS = ("xgb", "xgb-joint", "random", "grid")  # names of make_tuner's strategies
# XGBTuner variants by name (its keyword arguments).  "xgb" is the default search, the one
# the validation set chose and the held-out set confirmed; the others stay so that the study
# (lab/) can compare them with it.
XGB_VARIANTS = {
    "xgb": {},
    "xgb-joint": {"transfer": "joint", "hedge": False},  # the pooled fit: histories and own records in one model
    "xgb-unhedged": {"hedge": False},  # residual transfer, no hedge: the histories may veto a region
    "xgb-hedged": {"hedge": True},  # residual transfer with the hedge (see XGBTuner)
    "xgb-fast-fade": {"hedge": True, "half_life": 16.0},  # the hedge, the base fading 4x faster
}
# How XGBTuner learns from other workloads: "residual" corrects a model of them with the
# workload's own measurements; "joint" pools both in one fit (own rows weighted up).
TRANSFER_MODES = ("residual", "joint")


class XGBTuner(Tuner):
    """Model-guided tuner: XGBoost cost model + simulated annealing + some exploration.

    After every batch the model is refitted on the whole history and on records
    of other workloads (``load_history``), whose features come from their own
    spaces.  The next batch is the top of a simulated annealing run on the
    model's scores, plus ``explore_ratio`` of uniformly random configs so that
    a wrong model cannot trap the search.

    ``hedge``: while the model knows only other workloads (the batches proposed before this
    workload's first results), half of its picks are the prior's diverse picks, the batch a
    run without transfer starts with.  The histories can rank a whole region low that this
    shape needs (split-K 8 on a held-out batch-2 1280-channel 3x3); once measured, such
    configs correct the model, while configs it never proposes never can.
    """

    def __init__(self, space: ConfigSpace, seed: int | None = None, explore_ratio: float = 0.15,
                 n_chains: int = 128, n_steps: int = 100, temperature: float = 1.0,
                 transfer: str = "residual", hedge: bool = True, half_life: float = 64.0):
        super().__init__(space, seed)
        if transfer not in TRANSFER_MODES:
            raise ValueError(f"unknown transfer mode {transfer!r} (one of {', '.join(TRANSFER_MODES)})")
        self.explore_ratio = explore_ratio
        self.n_chains = n_chains
        self.n_steps = n_steps
        self.temperature = temperature
        self.transfer = transfer
        self.hedge = hedge
        model_seed = 0 if seed is None else seed
        self.model = (TransferCostModel(seed=model_seed, half_life=half_life) if transfer == "residual"
                      else XGBCostModel(seed=model_seed))
        self._history_x = np.zeros((0, len(space.template.feature_names)), np.float32)  # features of history[:len]
        self._transfer = _TransferSet()
        self._base_rows = -1  # transfer rows the base model was fitted on (residual mode)

    # ---- training ---------------------------------------------------------------
    def update(self, configs, results) -> None:
        super().update(configs, results)
        self._refit()

    def load_history(self, records) -> int:
        added = super().load_history(records)
        self._refit()
        return added

    def load_transfer(self, records) -> int:
        taken = super().load_transfer(records)
        self._refit()
        return taken

    def _add_transfer(self, workload, source, index, result) -> None:
        self._transfer.add(workload, source, index, result)

    def _refit(self) -> None:
        done = len(self._history_x)
        if done < len(self.history):
            new = features_from_positions(
                self.space, positions_from_configs(self.space, [c for c, _ in self.history[done:]]))
            self._history_x = np.concatenate([self._history_x, new])
        flops = self.workload.flops
        y = np.array([flops / r.seconds if r.ok else 0.0 for _, r in self.history], dtype=np.float64)
        tx, ty, tg = self._transfer.arrays(self.space.gpu, self.space.template)
        if self.transfer == "residual":
            if self._base_rows != len(ty):  # the transfer set changed: refit the base once
                self.model.fit_base(tx, ty, tg)
                self._base_rows = len(ty)
            self.model.fit(self._history_x, y)
            return
        groups = np.concatenate([np.zeros(len(y), np.int64), tg])  # 0: this workload
        # This workload's own measurements count as much as all transfer data together.
        own = max(1.0, len(ty) / max(len(y), 1))
        weights = np.concatenate([np.full(len(y), own), np.ones(len(ty))])
        self.model.fit(np.concatenate([self._history_x, tx]), np.concatenate([y, ty]), groups, weights)

    # ---- choosing ---------------------------------------------------------------
    def next_batch(self, n: int) -> list[Config]:
        n_random = min(n, int(round(n * self.explore_ratio)))
        taken: set[int] = set()
        picks = []
        if not self.history:  # the default config is the baseline every search should beat
            picks = self._take([self.space.index(self.space.default_config())], 1, taken)
        n_model = n - n_random - len(picks)
        if not self.model.fitted:  # nothing to learn from yet: all from the prior
            n_prior = n_model
        elif self.hedge and not self.history:  # only other workloads' records so far: hedge
            n_prior = n_model // 2
        else:
            n_prior = 0
        if n_prior:  # diverse configs the prior likes
            picks += self._anneal(n_prior, taken, score=self._prior, diverse=True)
        if n_model > n_prior:
            picks += self._anneal(n_model - n_prior, taken)
        return picks + self._random_configs(n - len(picks), taken)

    def _prior(self, pos: np.ndarray) -> np.ndarray:
        return prior_score(self.space, pos)

    def _score(self, pos: np.ndarray) -> np.ndarray:
        return self.model.predict(features_from_positions(self.space, pos))

    def _anneal(self, n: int, taken: set[int], score=None, diverse: bool = False) -> list[Config]:
        """Simulated annealing on predicted scores; the best ``n`` unmeasured configs it saw.

        All chains step at once (one vectorised featurise + predict per step).  Every
        visited valid point is kept and the top ``n`` unmeasured ones taken at the end,
        which is what a top-k heap would hold, in one sort.  ``score`` replaces the
        model's predictions; ``diverse`` prefers configs of distinct block tiles.
        """
        score = score or self._score
        if n <= 0:
            return []
        space = self.space
        starts = positions_from_indices(space, self._starts(self.n_chains))
        pos, values = anneal_walk(space, score, starts, self.rng, self.n_steps, temperature=self.temperature)
        if len(pos) == 0:
            return []
        idx = indices_from_positions(space, pos)
        order = np.lexsort((idx, -values))  # best score first, ties by index: deterministic
        ranked = np.unique(idx[order], return_index=True)
        ranked = idx[order][np.sort(ranked[1])]
        if diverse:  # one config per block-tile shape first, then the rest in score order
            first = np.unique(block_tiles(space, positions_from_indices(space, ranked)), axis=0,
                              return_index=True)[1]
            head = np.sort(first)
            ranked = np.concatenate([ranked[head], np.delete(ranked, head)])
        return self._take(ranked, n, taken)

    def _starts(self, chains: int) -> np.ndarray:
        """Chain starts: the best measured configs (half at most), then random valid points."""
        ok = sorted((r.seconds, self.space.index(c)) for c, r in self.history if r.ok)
        starts = np.array(list(dict.fromkeys(i for _, i in ok))[: chains // 2], dtype=np.int64)
        for _ in range(8):
            if len(starts) >= chains:
                return starts[:chains]
            draw = self.space.drawn(self.rng.integers(0, self.space.draw_bound, size=4 * chains))
            draw = draw[valid_mask(self.space, positions_from_indices(self.space, draw))]
            starts = np.concatenate([starts, draw[: chains - len(starts)]])
        for _ in range(_DRAW_ROUNDS):  # few valid configs: larger draws, never a full-space scan
            if len(starts) >= chains:
                return starts[:chains]
            draw = self.space.drawn(self.rng.integers(0, self.space.draw_bound, size=_CHUNK))
            draw = draw[valid_mask(self.space, positions_from_indices(self.space, draw))]
            starts = np.concatenate([starts, draw[: chains - len(starts)]])
        if len(starts) < chains and len(self.space) <= _SCAN_LIMIT:
            pool = self._valid_indices()
            if pool.size:
                starts = np.concatenate([starts, self.rng.choice(pool, chains - len(starts))])
        return starts[:chains]


def make_tuner(name: str, space: ConfigSpace, seed: int | None = None) -> Tuner:
    """The tuner called ``name`` (one of ``TUNERS`` or ``XGB_VARIANTS``) on ``space``."""
    if name in XGB_VARIANTS:
        return XGBTuner(space, seed=seed, **XGB_VARIANTS[name])
    classes = {"random": RandomTuner, "grid": GridTuner}
    if name not in classes:
        raise ValueError(f"unknown tuner {name!r} (choose from {', '.join(dict.fromkeys((*TUNERS, *XGB_VARIANTS)))})")
    return classes[name](space, seed=seed)


@dataclass
class _TransferSet:
    """Records of other workloads (or GPUs), kept as indices and featurised on demand."""

    rows: dict = field(default_factory=dict)  # (workload, source GPU) -> ([index], [throughput])
    _cache: tuple | None = None

    def add(self, workload, source, index: int, result: MeasureResult) -> None:
        indices, tput = self.rows.setdefault((workload, source), ([], []))
        indices.append(index)
        tput.append(workload.flops / result.seconds if result.ok else 0.0)
        self._cache = None

    def arrays(self, gpu, template) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(features, throughputs, group ids >= 1), one group per (workload, source GPU):
        the ranking objective compares configs only within what one GPU measured."""
        if self._cache is None:
            xs, ys, gs = [], [], []
            for group, ((workload, _source), (indices, tput)) in enumerate(self.rows.items(), start=1):
                space = ConfigSpace(workload, gpu, template=template)
                xs.append(features_from_positions(space, positions_from_indices(space, indices)))
                ys.append(np.asarray(tput, dtype=np.float64))
                gs.append(np.full(len(indices), group, dtype=np.int64))
            if not xs:
                xs = [np.zeros((0, len(template.feature_names)), np.float32)]
                ys, gs = [np.zeros(0)], [np.zeros(0, np.int64)]
            self._cache = (np.concatenate(xs), np.concatenate(ys), np.concatenate(gs))
        return self._cache
