"""The no-code mapping: an integration version's steps turn Scout's rows into ours, purely.

A mapping version is JSON kept per integration version:

    {"target": "unit", "key_fields": ["externalId"], "source": "Scout", "steps": [...]}

`MappingVersion.parse` checks it once and refuses a broken one with `MappingSpecError`, so no
row is ever mapped with it. `map_row` then gives every row an outcome, never an exception:
ok, problem (the reason says what is wrong), held (a question a person can act on) or skipped.

Each step is an object with an `op`; `path` reads Scout's row (dot paths, list indices as in
`competitors.0.name`), `field` and `to` are names in our output. The ops, their arguments and
what each does with a missing value are in services/imports/README-mapping.md:

    read        path, to, required?            copy a value from Scout's row
    rename      from, to                       move an output field
    map         field, table, unknown?, value?, case?   translate values through a table
    local_time  field                          wall-clock time in the event's zone -> ISO + offset
    lookup      path, kind, to, describe?, unknown?   Scout's id -> ours; unknown ids are held
    default     field, value                   set a field that is missing or null
    skip_if     path | field, equals | in | missing, reason?   skip the row
    template    to, template                   build text from "{name}" parts
    integer     field                          a whole number (rank, medal counts)
    set         to, value                      a constant
    each        path, to, steps                nested steps on each element of a list

Each op is one class, its `parse` and its `apply` together: `_fields` (read, rename, default,
template, integer, set), `_translate` (map, local_time, lookup) and `_flow` (skip_if, each).
`_version` names them in one table and runs them on rows; `_step` and `_paths` are what the
steps share.
"""

from __future__ import annotations

from omnium_imports.mapping._fields import Default, Integer, Read, Rename, SetValue, Template
from omnium_imports.mapping._flow import Each, SkipIf, SkipTest
from omnium_imports.mapping._paths import read_path, row_hash
from omnium_imports.mapping._step import LOOKUP_KINDS, MappingContext, MappingSpecError, Step
from omnium_imports.mapping._translate import (
    LOOKUP_UNKNOWN,
    MAP_CASES,
    MAP_UNKNOWN,
    LocalTime,
    Lookup,
    LookupUnknown,
    MapCase,
    MapUnknown,
    MapValues,
)
from omnium_imports.mapping._version import (
    ABSENT,
    DEFAULT_KEY_FIELDS,
    DEFAULT_SOURCE,
    OPS,
    TARGETS,
    Absent,
    MappedRow,
    MappingVersion,
    Outcome,
    Target,
    load_default,
    written,
)

__all__ = [
    "ABSENT",
    "DEFAULT_KEY_FIELDS",
    "DEFAULT_SOURCE",
    "LOOKUP_KINDS",
    "LOOKUP_UNKNOWN",
    "MAP_CASES",
    "MAP_UNKNOWN",
    "OPS",
    "TARGETS",
    "Absent",
    "Default",
    "Each",
    "Integer",
    "LocalTime",
    "Lookup",
    "LookupUnknown",
    "MapCase",
    "MapUnknown",
    "MapValues",
    "MappedRow",
    "MappingContext",
    "MappingSpecError",
    "MappingVersion",
    "Outcome",
    "Read",
    "Rename",
    "SetValue",
    "SkipIf",
    "SkipTest",
    "Step",
    "Target",
    "Template",
    "load_default",
    "read_path",
    "row_hash",
    "written",
]
