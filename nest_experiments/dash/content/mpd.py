"""Parse a static DASH MPD with SegmentTemplate addressing into a small model.

Supported: one Period, AdaptationSets with a content type (``contentType``,
or the ``mimeType`` of the set or of its first Representation), a
SegmentTemplate on the AdaptationSet or on each Representation (the GPAC /
MP4Box style), ``$RepresentationID$``, ``$Number$`` (with ``%0Nd`` width),
``$Bandwidth$`` and ``$$``, ``@duration``/``@timescale``/``@startNumber``.
SegmentTimeline and SegmentList/SegmentBase are rejected with a clear error.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from nest_experiments.errors import ConfigError

_DURATION_RE = re.compile(
    r"^P(?:(?P<d>\d+(?:\.\d+)?)D)?(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?"
    r"(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)
_TEMPLATE_RE = re.compile(r"\$(RepresentationID|Number|Bandwidth|Time)(%0(\d+)d)?\$")


@dataclass(frozen=True, kw_only=True)
class SegmentTemplate:
    """``SegmentTemplate`` attributes that matter for number-based addressing."""

    media: str
    initialization: str | None
    timescale: int
    duration: int
    start_number: int

    @property
    def segment_duration_s(self) -> float:
        return self.duration / self.timescale


@dataclass(frozen=True, kw_only=True)
class Representation:
    """One Representation; ``template`` is the effective (inherited) template."""

    id: str
    bandwidth: int
    template: SegmentTemplate
    width: int | None = None
    height: int | None = None


@dataclass(frozen=True, kw_only=True)
class AdaptationSet:
    """An AdaptationSet; ``representations`` sorted by ascending bandwidth."""

    index: int  # 0-based position in the MPD (GPAC's AS# is index + 1)
    content_type: str  # "video" | "audio" | other
    representations: tuple[Representation, ...]

    @property
    def bitrates_bps(self) -> tuple[int, ...]:
        return tuple(r.bandwidth for r in self.representations)


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """The parsed MPD."""

    duration_s: float
    min_buffer_time_s: float
    adaptation_sets: tuple[AdaptationSet, ...]

    def adaptation_set(self, content_type: str) -> AdaptationSet:
        """The first AdaptationSet of ``content_type`` ("video" | "audio")."""
        for aset in self.adaptation_sets:
            if aset.content_type == content_type:
                return aset
        raise ConfigError("MPD", f"no {content_type} AdaptationSet")

    def segment_duration_s(self, content_type: str) -> float:
        return self.adaptation_set(content_type).representations[0].template.segment_duration_s

    def segment_count(self, content_type: str) -> int:
        """Number of media segments covering ``duration_s``."""
        seg = self.segment_duration_s(content_type)
        return max(1, math.ceil(self.duration_s / seg - 1e-6))

    def segment_media_duration_s(self, content_type: str, index: int) -> float:
        """Media seconds in segment ``index`` (0-based); the last may be short."""
        seg = self.segment_duration_s(content_type)
        return max(0.0, min(seg, self.duration_s - index * seg))


def segment_url(rep: Representation, index: int) -> str:
    """Relative URL of media segment ``index`` (0-based) of ``rep``."""
    number = rep.template.start_number + index
    return expand(rep.template.media, rep, number)


def init_url(rep: Representation) -> str | None:
    """Relative URL of the initialization segment, or None when there is none."""
    if rep.template.initialization is None:
        return None
    return expand(rep.template.initialization, rep, None)


def expand(template: str, rep: Representation, number: int | None) -> str:
    """Substitute the DASH template identifiers (ISO/IEC 23009-1 5.3.9.4.4)."""

    def one(match: re.Match[str]) -> str:
        name, width = match.group(1), int(match.group(3) or 0)
        if name == "RepresentationID":
            return rep.id
        value = rep.bandwidth if name == "Bandwidth" else number
        if value is None:
            raise ConfigError("SegmentTemplate", f"${name}$ not allowed in {template!r}")
        return str(value).zfill(width)

    return _TEMPLATE_RE.sub(one, template).replace("$$", "$")


def parse_duration(text: str) -> float:
    """xs:duration (``PT0H1M0.000S``, ``PT184S``, ``P1DT2H``) -> seconds."""
    match = _DURATION_RE.match(text.strip())
    if not match or text.strip() in ("P", "PT"):
        raise ConfigError("MPD", f"invalid duration {text!r}")
    parts = {k: float(v) for k, v in match.groupdict().items() if v}
    return parts.get("d", 0) * 86400 + parts.get("h", 0) * 3600 + parts.get("m", 0) * 60 + parts.get("s", 0)


def parse_mpd(text: str | bytes) -> Manifest:
    """Parse MPD XML into a :class:`Manifest`; errors name the element/attribute."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ConfigError("MPD", f"not valid XML: {exc}") from exc
    ns = _namespace(root)
    if root.get("type", "static") != "static":
        raise ConfigError("MPD@type", "only static MPDs are supported")
    periods = root.findall(f"{ns}Period")
    if len(periods) != 1:
        raise ConfigError("MPD/Period", f"exactly one Period supported, found {len(periods)}")
    return Manifest(
        duration_s=_presentation_duration(root, periods[0]),
        min_buffer_time_s=parse_duration(root.get("minBufferTime", "PT0S")),
        adaptation_sets=_adaptation_sets(periods[0], ns),
    )


def _namespace(root: ET.Element) -> str:
    return root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""


def _presentation_duration(root: ET.Element, period: ET.Element) -> float:
    text = root.get("mediaPresentationDuration") or period.get("duration")
    if not text:
        raise ConfigError("MPD@mediaPresentationDuration", "missing")
    return parse_duration(text)


def _adaptation_sets(period: ET.Element, ns: str) -> tuple[AdaptationSet, ...]:
    sets = period.findall(f"{ns}AdaptationSet")
    if not sets:
        raise ConfigError("MPD/Period/AdaptationSet", "none found")
    return tuple(_adaptation_set(i, el, ns) for i, el in enumerate(sets))


def _adaptation_set(index: int, el: ET.Element, ns: str) -> AdaptationSet:
    where = f"AdaptationSet[{index}]"
    reps_el = el.findall(f"{ns}Representation")
    if not reps_el:
        raise ConfigError(where, "no Representation")
    parent_tpl = el.find(f"{ns}SegmentTemplate")
    reps = [_representation(r, parent_tpl, ns, f"{where}/Representation[{i}]") for i, r in enumerate(reps_el)]
    return AdaptationSet(
        index=index,
        content_type=_content_type(el, reps_el[0]),
        representations=tuple(sorted(reps, key=lambda r: r.bandwidth)),
    )


def _content_type(el: ET.Element, first_rep: ET.Element) -> str:
    if el.get("contentType"):
        return el.get("contentType", "")
    mime = el.get("mimeType") or first_rep.get("mimeType") or ""
    return mime.split("/", 1)[0] if "/" in mime else "unknown"


def _representation(el: ET.Element, parent_tpl: ET.Element | None, ns: str, where: str) -> Representation:
    rep_id = el.get("id")
    if not rep_id:
        raise ConfigError(f"{where}@id", "missing")
    own = el.find(f"{ns}SegmentTemplate")
    if own is None and parent_tpl is None:
        raise ConfigError(
            f"{where}/SegmentTemplate",
            "missing (only SegmentTemplate addressing is supported)",
        )
    return Representation(
        id=rep_id,
        bandwidth=_int_attr(el, "bandwidth", where),
        template=_template(own, parent_tpl, ns, where),
        width=_opt_int(el.get("width")),
        height=_opt_int(el.get("height")),
    )


def _template(own: ET.Element | None, parent: ET.Element | None, ns: str, where: str) -> SegmentTemplate:
    def attr(name: str) -> str | None:
        for el in (own, parent):
            if el is not None and el.get(name) is not None:
                return el.get(name)
        return None

    for el in (own, parent):
        if el is not None and el.find(f"{ns}SegmentTimeline") is not None:
            raise ConfigError(f"{where}/SegmentTemplate/SegmentTimeline", "not supported")
    media, duration = attr("media"), attr("duration")
    if not media or not duration:
        raise ConfigError(f"{where}/SegmentTemplate", "needs @media and @duration")
    return SegmentTemplate(
        media=media,
        initialization=attr("initialization"),
        timescale=int(attr("timescale") or 1),
        duration=int(duration),
        start_number=int(attr("startNumber") or 1),
    )


def _int_attr(el: ET.Element, name: str, where: str) -> int:
    value = _opt_int(el.get(name))
    if value is None:
        raise ConfigError(f"{where}@{name}", "missing or not an integer")
    return value


def _opt_int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
