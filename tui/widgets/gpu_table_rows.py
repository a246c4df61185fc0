"""Which rows the GPU table shows, in what order: filter, sort and folding over the fleet.

`TableRows.build` is the table's rebuild without the widget: one pass over the hosts' current
samples that reads only what changed since the last pass (each host's GPU indices and filter
texts while its GPUs are the same, its top value while its sample is the same, the name order
while the hosts are the same), then the order, then the rows as a `RowIndex`. At 4,096 8-GPU
hosts a key rebuilds the rows of 36,864 lines: the objects it leaves behind are few lists, not
one or more per host, so the collector that runs after it has little to visit.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from itertools import accumulate, compress
from operator import add, attrgetter, is_not, truediv
from typing import NamedTuple, overload

from tui.cluster.models import (
    DELTA_METRICS,
    GPU_METRICS,
    DeltaSample,
    GpuSample,
    HostSample,
    HostTelemetry,
)


class Row(NamedTuple):
    # A tuple: compared and hashed in C (rebuild finds the cursor's row among 9,216 at 1,024
    # hosts), and each host's rows are made once and reused by every rebuild.
    host: str
    gpu: int | None = None  # None: the host's own row


class RankedGpus:
    """A host's shown GPUs under a metric sort, ranked by value when its rows are first read:
    a sort places every host by its top value, but only the hosts read (the lines on screen,
    the cursor's) need their GPUs in order."""

    __slots__ = ("descending", "idx", "positions", "values")

    def __init__(
        self,
        idx: tuple[int, ...],
        values: list[float],
        positions: Sequence[int] | None,
        descending: bool,
    ) -> None:
        self.idx, self.values, self.positions, self.descending = idx, values, positions, descending

    def __len__(self) -> int:
        return len(self.idx) if self.positions is None else len(self.positions)

    def ranked(self) -> tuple[int, ...]:
        order = sorted(
            range(len(self.idx)) if self.positions is None else self.positions,
            key=self.values.__getitem__,
            reverse=self.descending,
        )
        idx = self.idx
        return tuple([idx[i] for i in order])


class RowIndex(Sequence[Row]):
    """The table's rows in order, kept as each shown host and its shown GPU indices: a row
    object is made only when one is read (the lines on screen, the cursor's). At 4,096 hosts
    a list of Row objects meant 36,864 appends per sort, filter or fold key, and the
    collector's pass over them after.

    `gpus[h]` is what the h-th host shows: its GPU indices in order, or a RankedGpus; with
    `rank`, any sequence of the shown GPUs' count, put in order by `rank(h)` when first read
    (a metric sort ranks a host's GPUs only when its rows are read)."""

    __slots__ = ("_gpus", "_hosts", "_len", "_rank", "_starts", "_todo")

    def __init__(
        self,
        hosts: list[str],
        gpus: list,
        rank: Callable[[int], tuple[int, ...]] | None = None,
    ) -> None:
        self._hosts, self._gpus, self._rank = hosts, gpus, rank
        # The h-th host's first row: h rows of hosts before it and their GPUs' (in C).
        self._starts = list(map(add, accumulate(map(len, gpus), initial=0), range(len(gpus) + 1)))
        self._len = self._starts[-1]
        self._todo = bytearray(b"\x01") * len(hosts) if rank is not None else None

    def __len__(self) -> int:
        return self._len

    def _shown(self, h: int) -> tuple[int, ...]:
        """The GPU indices shown under the h-th host, in order (ranked now if not yet)."""
        shown = self._gpus[h]
        todo = self._todo
        if todo is not None and todo[h]:
            assert self._rank is not None
            shown = self._gpus[h] = self._rank(h) if shown else ()
            todo[h] = 0
        elif isinstance(shown, RankedGpus):
            shown = self._gpus[h] = shown.ranked()
        return shown

    @overload
    def __getitem__(self, i: int) -> Row: ...
    @overload
    def __getitem__(self, i: slice) -> list[Row]: ...
    def __getitem__(self, i: int | slice) -> Row | list[Row]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self._len))]
        at = i + self._len if i < 0 else i
        if not 0 <= at < self._len:
            raise IndexError(i)
        h = bisect_right(self._starts, at) - 1
        off = at - self._starts[h]
        return Row(self._hosts[h]) if off == 0 else Row(self._hosts[h], self._shown(h)[off - 1])

    def __iter__(self) -> Iterator[Row]:
        for h, host in enumerate(self._hosts):
            yield Row(host)
            for gpu in self._shown(h):
                yield Row(host, gpu)

    def _position(self, row: object) -> int | None:
        if not isinstance(row, Row):
            return None
        try:  # in C; a lookup is rare (the cursor's row after a rebuild, a fold)
            h = self._hosts.index(row.host)
        except ValueError:
            return None
        if row.gpu is None:
            return self._starts[h]
        try:
            return self._starts[h] + 1 + self._shown(h).index(row.gpu)
        except ValueError:
            return None

    def __contains__(self, row: object) -> bool:
        return self._position(row) is not None

    def index(self, row: object, start: int = 0, stop: int | None = None) -> int:
        at = self._position(row)
        if at is None or at < start or (stop is not None and at >= stop):
            raise ValueError(f"{row!r} is not in the table")
        return at

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RowIndex):
            n = range(len(self._hosts))
            return self._hosts == other._hosts and all(self._shown(h) == other._shown(h) for h in n)
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RowIndex({list(self)!r})"


# The GpuSample field each metric sort key reads ("mem" reads memory_used_bytes, over the
# base's total), and that field's place in a delta sample's checked values.
_SORT_FIELD = {
    "util": "util_percent",
    "mem": "memory_used_bytes",
    "temp": "temperature_c",
    "power": "power_w",
    **{m.title.lower(): m.key for m in GPU_METRICS if m.title},
}
_DELTA_COLUMN = {m.key: j for j, m in enumerate(DELTA_METRICS)}

_LATEST = attrgetter("latest")
_LINK, _TSTATE = attrgetter("link"), attrgetter("state")  # what display_state reads
_UNSEEN = object()  # no sample is this one: a column entry to read

GpuMetricFn = Callable[[GpuSample, str], float]  # a built GPU's sort value for a key


def metric_values(
    sample: HostSample, key: str, gpu_metric: GpuMetricFn
) -> tuple[tuple[GpuSample, ...], list[float]]:
    """A sample's GPUs (ids) and each one's sort value for a metric key, as `gpu_metric` reads
    them. A delta sample's values were checked at the boundary and are its GPUs' as sent
    (DeltaSample.column), so they are read there: a sort builds no GPU objects (at 4,096
    hosts, 32,768 a sort and every re-sort under load, and their collection)."""
    j = _DELTA_COLUMN.get(_SORT_FIELD.get(key, ""))
    if type(sample) is DeltaSample and j is not None:
        ids, raw = sample.gpu_ids, sample.column(j)
        if key == "mem":
            return ids, [
                -1.0 if used is None or not g.memory_total_bytes else used / g.memory_total_bytes
                for g, used in zip(ids, raw, strict=True)
            ]
        return ids, [-1.0 if v is None else float(v) for v in raw]
    gpus = sample.gpus
    return gpus, [gpu_metric(g, key) for g in gpus]


class _GpuKeys(NamedTuple):
    """What a host's rows need of its GPUs, made once while they are the same objects."""

    ids: tuple[GpuSample, ...]  # the GPUs they were made from
    idx: tuple[int, ...]  # their indices, in order
    texts: tuple[str, ...]  # their filter texts (name and "gpuN", lowered)
    totals: tuple[int, ...] | None  # their memory totals, None where one is missing or 0


class Built(NamedTuple):
    """A build's rows, and what each host's rows depended on (its GPU count, and its state
    and hostname where the sort or the filter read them), kept as plain columns: no object
    per host for the collector to visit."""

    rows: RowIndex
    counts: dict[str, int]
    states: dict[str, str] | None  # None: neither the sort nor the filter read them
    hostnames: dict[str, str | None] | None

    def shape(self, host: str) -> object:
        """GpuTable._host_shape's value for `host` at the build (None: not in it)."""
        count = self.counts.get(host)
        if count is None or self.states is None or self.hostnames is None:
            return count
        return (count, self.states[host], self.hostnames[host])


class TableRows:
    """The table's rows from the fleet (`build`), with what a rebuild can keep between
    rebuilds: each host's GPU keys (its indices, filter texts, memory totals), its top value
    under a metric sort while its sample is the same, the hosts' name order."""

    def __init__(self, gpu_metric: GpuMetricFn) -> None:
        self._gpu_metric = gpu_metric
        self._keys: dict[str, _GpuKeys] = {}
        self._shared: dict[tuple, tuple] = {}  # equal index and text tuples as one object
        self._gpu_hay: dict[tuple[str | None, int], str] = {}  # a GPU's filter text
        self._host_hay: dict[str, tuple[str | None, str, str]] = {}  # (hostname, both lowered)
        self._names: list[str] = []  # the hosts, in the mapping's order, at the last build
        self._by_name: list[int] | None = None  # their positions in name order
        self._seen: dict[str, HostSample] = {}  # host → the sample its GPU keys are of
        # Per host, in the mapping's order (see _columns): the sample the columns were read
        # from, its GPU keys, shown indices, count, and top value under _top_col_key's sort.
        self._at: dict[str, int] | None = None  # host → its position, made when needed
        self._samples: list[object] = []
        self._key_col: list[_GpuKeys | None] = []
        self._idx_col: list[tuple[int, ...]] = []
        self._count_col: list[int] = []
        self._top_col: list[float] = []
        self._top_col_key = ""
        self._built_keys = False
        self._state_col: list[str] | None = None  # each host's display_state (see _states)
        self._link_col: list[object] = []
        self._tstate_col: list[object] = []
        self._last: Built | None = None  # the last build
        self._retired: tuple | None = None  # what the build before it held (see build)

    def gpu_text(self, gpu: GpuSample) -> str:
        # The same few (name, index) pairs across the fleet: lowered once, not per rebuild.
        key = (gpu.name, gpu.index)
        text = self._gpu_hay.get(key)
        if text is None:
            text = self._gpu_hay[key] = f"{gpu.name or ''}\0gpu{gpu.index}".lower()
        return text

    def host_matches(self, ht: HostTelemetry, needle: str, state: str | None = None) -> bool:
        """The filter's host part: the needle (lowered) in its name, hostname or state."""
        hay = self._host_hay.get(ht.name)
        if hay is None or hay[0] is not ht.hostname:
            hay = (ht.hostname, ht.name.lower(), (ht.hostname or "").lower())
            self._host_hay[ht.name] = hay
        if needle in hay[1] or needle in hay[2]:
            return True
        return needle in (ht.display_state if state is None else state).lower()

    def gpu_keys(self, host: str, ids: tuple[GpuSample, ...]) -> _GpuKeys:
        """The indices of `ids`, their filter texts and memory totals: made once per host while
        its GPUs (a delta sample's base, the same object every second) stay the same."""
        cached = self._keys.get(host)
        if cached is not None and cached.ids is ids:
            return cached
        shared = self._shared
        idx = tuple(g.index for g in ids)
        texts = tuple(self.gpu_text(g) for g in ids)
        totals = tuple(g.memory_total_bytes or 0 for g in ids)
        keys = self._keys[host] = _GpuKeys(
            ids,
            shared.setdefault(idx, idx),
            shared.setdefault(texts, texts),
            shared.setdefault(totals, totals) if all(totals) else None,
        )
        return keys

    def _host_keys(self, name: str, sample: HostSample, built: bool) -> _GpuKeys:
        """The host's GPU keys for `sample`: of its ids (a delta sample's base GPUs), or with
        `built`, of its built GPUs (a metric sort that reads a delta sample's GPU objects)."""
        if built:
            self._seen.pop(name, None)
            return self.gpu_keys(name, sample.gpus)
        if self._seen.get(name) is sample:
            return self._keys[name]
        keys = self.gpu_keys(name, sample.gpu_ids)
        self._seen[name] = sample
        return keys

    def _top_value(self, sample: HostSample, k: _GpuKeys, key: str, j: int | None) -> float:
        """The host's place under a metric sort: the highest of its GPUs' values (all of them,
        shown or not), as metric_values reads them; -1.0 with none. Read in C where every
        value is there."""
        value = None
        if j is not None and type(sample) is DeltaSample:
            raw = sample.column(j)
            if raw and None not in raw:
                if key != "mem":
                    value = float(max(raw))  # float() keeps the order: max of the floats
                elif k.totals is not None and len(raw) == len(k.totals):
                    value = max(map(truediv, raw, k.totals))
        if value is None:
            values = metric_values(sample, key, self._gpu_metric)[1]
            value = max(values) if values else -1.0
        return value

    def _reads_built(self, key: str) -> bool:
        """Whether a metric sort by `key` reads a delta sample's built GPUs (its value is not
        among a delta's columns)."""
        return key not in ("name", "state") and _SORT_FIELD.get(key, "") not in _DELTA_COLUMN

    def prepare(self, hts: Iterable[HostTelemetry], key: str) -> None:
        """New samples came for `hts` (a telemetry frame): under a metric sort their columns
        and top values are read now, while the samples are fresh, so that the next rebuild
        (the 1 Hz re-sort, a key) finds them read. Sorted by name or state nothing is: no
        rebuild comes every second there, and a key reads only the hosts that changed. What
        the build before the last held is freed here (see build)."""
        self._retired = None
        if key in ("name", "state") or self._built_keys or self._top_col_key != key:
            return  # the next build reads every host again anyway
        at = self._positions()
        samples, read = self._samples, self._read
        j = _DELTA_COLUMN.get(_SORT_FIELD.get(key, ""))
        for ht in hts:
            i = at.get(ht.name)
            sample = ht.latest
            if i is not None and samples[i] is not sample:
                read(i, ht.name, sample, False, key, j)
                samples[i] = sample

    def _positions(self) -> dict[str, int]:
        """Each host's position in the columns (the mapping's order at the last build)."""
        if self._at is None:
            self._at = {name: i for i, name in enumerate(self._names)}
        return self._at

    def _read(
        self, i: int, name: str, sample: HostSample | None, built: bool, key: str, j: int | None
    ) -> None:
        """The i-th host's columns from its sample (its top value too under a metric sort)."""
        if sample is None:
            self._key_col[i], self._idx_col[i], self._count_col[i] = None, (), 0
            self._top_col[i] = -1.0
            return
        k = self._key_col[i] = self._host_keys(name, sample, built)
        self._idx_col[i], self._count_col[i] = k.idx, len(k.idx)
        if key not in ("name", "state"):
            self._top_col[i] = self._top_value(sample, k, key, j)

    def _columns(
        self, hosts: Mapping[str, HostTelemetry], key: str
    ) -> tuple[list[str], list[HostTelemetry], list[HostSample | None]]:
        """Bring the per-host columns (GPU keys, indices, counts, top values under a metric
        sort), aligned with the mapping's order, up to date: only the hosts whose sample is
        not the one of the last build are read again (found in C)."""
        names = list(hosts)
        hts = list(hosts.values())
        samples: list[HostSample | None] = list(map(_LATEST, hts))
        by_metric = key not in ("name", "state")
        built = self._reads_built(key)
        if names != self._names or built or self._built_keys:
            if names != self._names:
                live = set(names)
                for cache in (self._keys, self._seen, self._host_hay):
                    for gone in [n for n in cache if n not in live]:
                        del cache[gone]
            self._names, self._by_name, self._at = names, None, None
            self._state_col = None
            n = len(names)
            self._samples = [_UNSEEN] * n
            self._key_col = [None] * n
            self._idx_col = [()] * n
            self._count_col = [0] * n
            self._top_col = [-1.0] * n
            self._top_col_key = ""
            self._built_keys = built  # the columns hold a metric's built GPUs' keys
        redo = compress(range(len(names)), map(is_not, samples, self._samples))
        j = _DELTA_COLUMN.get(_SORT_FIELD.get(key, ""))
        read = self._read
        if by_metric and self._top_col_key != key:  # another metric: every host's top again
            redo_set = set(redo)
            top_value, key_col, top_col = self._top_value, self._key_col, self._top_col
            for i, (sample, k) in enumerate(zip(samples, key_col, strict=True)):
                if i in redo_set:
                    read(i, names[i], sample, built, key, j)
                elif sample is not None and k is not None:  # its columns are read: the top
                    top_col[i] = top_value(sample, k, key, j)
                else:
                    top_col[i] = -1.0
            self._top_col_key = key
        else:
            for i in redo:
                read(i, names[i], samples[i], built, key, j)
        self._samples = list(samples)
        if not by_metric:
            self._top_col_key = ""  # the top values were not kept up to date
        return names, hts, samples

    def _states(self, hts: list[HostTelemetry]) -> list[str]:
        """Each host's display_state, read again only where its link or its telemetry state is
        not the object of the last read (both immutable: display_state reads only them)."""
        links = list(map(_LINK, hts))
        tstates = list(map(_TSTATE, hts))
        col = self._state_col
        if col is None or len(col) != len(hts):
            col = self._state_col = [ht.display_state for ht in hts]
        else:
            n = range(len(hts))
            moved = set(compress(n, map(is_not, links, self._link_col)))
            moved.update(compress(n, map(is_not, tstates, self._tstate_col)))
            for i in moved:
                col[i] = hts[i].display_state
        self._link_col, self._tstate_col = links, tstates
        return col

    def _order(self, key: str, reverse: bool, states: list[str] | None) -> list[int]:
        """The hosts' positions (in the mapping's order) in the sort's order."""
        names = self._names
        if key in ("name", "state"):
            by_name = self._by_name
            if by_name is None:
                by_name = self._by_name = sorted(range(len(names)), key=names.__getitem__)
            if key == "state":  # (up, name): the hosts not up first, each part by name
                assert states is not None
                by_name = [i for i in by_name if states[i] != "up"] + [
                    i for i in by_name if states[i] == "up"
                ]
            return by_name[::-1] if reverse else by_name
        # Stable: equal tops keep the mapping's order, either way.
        return sorted(range(len(names)), key=self._top_col.__getitem__, reverse=not reverse)

    def build(
        self,
        hosts: Mapping[str, HostTelemetry],
        key: str,
        reverse: bool,
        filter_text: str,
        collapsed: Collection[str],
    ) -> Built:
        """The rows shown (filter, sort, folding) and each host's shape."""
        # What the last build held (the samples it read, which a metric sort's rows keep to
        # rank a host's GPUs when drawn) goes at the next telemetry frame (prepare), not in
        # this key's time: the frames have replaced most of them since, and freeing ~4,000
        # samples was 3 ms of a sort key at 4,096 hosts on the 2-core box.
        retired = (self._samples, self._last)
        names, hts, samples = self._columns(hosts, key)
        by_metric = key not in ("name", "state")
        needle = filter_text.lower()
        plain = not (key == "state" or filter_text)
        keys, idx_col = self._key_col, self._idx_col
        states = self._states(hts) if not plain else None
        shape_states = shape_hostnames = None
        if states is not None:
            shape_states = dict(zip(names, states, strict=True))
            shape_hostnames = {name: ht.hostname for name, ht in zip(names, hts, strict=True)}
        shapes = (dict(zip(names, self._count_col, strict=True)), shape_states, shape_hostnames)
        order = self._order(key, reverse, states)
        empty: tuple[int, ...] = ()
        # Per shown host: its position in the mapping (src) and the GPU positions the filter
        # kept (None: all).
        src: list[int]
        kept: list[Sequence[int] | None] | None = None
        if not needle:
            src = order
            if collapsed:  # a folded host shows no GPU row
                at = self._at
                if at is None:
                    at = self._at = {name: i for i, name in enumerate(names)}
                shown_idx = list(idx_col)
                for name in collapsed:
                    i = at.get(name)
                    if i is not None:
                        shown_idx[i] = empty
                gpus: list = list(map(shown_idx.__getitem__, src))
            else:
                gpus = list(map(idx_col.__getitem__, src))
        else:
            src, gpus, kept = [], [], []
            positions_of: dict[tuple[str, ...], list[int]] = {}  # a texts tuple's, this build
            picked: dict[tuple[tuple[int, ...], tuple[str, ...]], tuple[int, ...]] = {}
            assert states is not None
            for i in order:
                k = keys[i]
                idx = empty if k is None else k.idx
                positions: list[int] | None = None  # None: all of them
                if not self.host_matches(hts[i], needle, states[i]):
                    texts = () if k is None else k.texts
                    positions = positions_of.get(texts)
                    if positions is None:
                        positions = positions_of[texts] = [
                            p for p, text in enumerate(texts) if needle in text
                        ]
                    if not positions:
                        continue
                src.append(i)
                kept.append(positions)
                if names[i] in collapsed:
                    gpus.append(empty)
                elif by_metric or positions is None:
                    gpus.append(idx if positions is None else positions)
                else:
                    assert k is not None
                    shown = picked.get((idx, k.texts))
                    if shown is None:
                        shown = picked[(idx, k.texts)] = tuple([idx[p] for p in positions])
                    gpus.append(shown)
        hosts_shown = list(map(names.__getitem__, src))
        gpu_metric, descending = self._gpu_metric, not reverse

        def rank(h: int) -> tuple[int, ...]:
            i = src[h]
            sample, k = samples[i], keys[i]
            assert sample is not None and k is not None
            values = metric_values(sample, key, gpu_metric)[1]
            return RankedGpus(k.idx, values, None if kept is None else kept[h], descending).ranked()

        self._retired = retired
        self._last = Built(RowIndex(hosts_shown, gpus, rank if by_metric else None), *shapes)
        return self._last
