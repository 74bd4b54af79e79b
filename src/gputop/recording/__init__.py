"""Recordings: a run's Snapshots on disk (docs/recording.md), for postmortems, replay and test
fixtures. format: the file format and the record form of a Snapshot; writer: RecordingWriter;
reader: RecordingReader and SeriesReader; segments: the files of a run written in segments;
index and series_index: seeking by tick or time without reading what lies before."""

from __future__ import annotations

from gputop.recording.format import (
    FOOTER_SIZE,
    FORMAT,
    KEYFRAME_EVERY,
    MAX_SUMMARY,
    SUMMARY,
    VERSION,
    ReadBack,
    SnapshotDecoder,
    SummaryDamaged,
    apply,
    diff,
    from_record,
    read_summary,
    summary_place,
    ticks_match,
    to_record,
)
from gputop.recording.reader import (
    ReadResult,
    RecordingReader,
    SeriesReader,
    given_files,
    read_recording,
    read_series,
)
from gputop.recording.segments import next_segment, segment_paths
from gputop.recording.writer import COMPRESSION_LEVEL, RecordingWriter, Summarizer, round_to_sensor

__all__ = [
    "COMPRESSION_LEVEL",
    "FOOTER_SIZE",
    "FORMAT",
    "KEYFRAME_EVERY",
    "MAX_SUMMARY",
    "SUMMARY",
    "VERSION",
    "ReadBack",
    "ReadResult",
    "RecordingReader",
    "RecordingWriter",
    "SeriesReader",
    "SnapshotDecoder",
    "Summarizer",
    "SummaryDamaged",
    "apply",
    "diff",
    "from_record",
    "given_files",
    "next_segment",
    "read_recording",
    "read_series",
    "read_summary",
    "round_to_sensor",
    "segment_paths",
    "summary_place",
    "ticks_match",
    "to_record",
]
