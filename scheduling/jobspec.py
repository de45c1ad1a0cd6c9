"""JobSpec: the fields of a job its submitter sets, named once.

Everything that handles a submission derives its field list from here instead of spelling it out:
submit_job's arguments and the Job it makes (`as_model_kwargs`), the Idempotency-Key fingerprint
(`fingerprint_material`), a job submitted again (`submit_job(spec=JobSpec.from_job(job))`), the columns
the scheduling pass and its dry run read of a pending job (`ENGINE_COLUMNS`:
scheduling.pass_inputs.PENDING_COLUMNS). The jobs API's submission serializer declares each field with its
own type and help (the job form reads it: a field added there appears there);
tests/scheduling/test_jobspec.py checks it takes exactly these.

A new user-settable field: a Job column (and its migration), one field here (with a default, so older
jobs keep their fingerprint; `engine=True` if the engine reads it of a pending job), one serializer field.

Plain Python, no Django: relations (department, project) are held as the objects given and named by their
`pk` in the fingerprint and `<name>_id` as columns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar


def _about(*, relation: bool = False, engine: bool = False, group: str = "") -> dict[str, Any]:
    """A JobSpec field's metadata. `relation`: a foreign key (fingerprinted by pk, read as `<name>_id`).
    `engine`: the engine reads it of a pending job (the pass reads its column). `group`: fingerprinted
    together with the other fields of the group, as one list under the group's name, when the group's first
    field is set."""
    return {"relation": relation, "engine": engine, "group": group}


@dataclass(frozen=True)
class JobSpec:
    """What a person asks for when they submit a job (every other Job field is the system's).

    Required fields first (always in the fingerprint); a field with a default counts in the fingerprint
    only when it is not its default, so adding one keeps the fingerprints of the jobs stored before it.
    """

    department: Any = field(metadata=_about(relation=True, engine=True))  # tenancy.models.Department
    name: str = field(metadata=_about())
    gpus: int = field(metadata=_about(engine=True))
    topology: str = field(metadata=_about(engine=True))
    priority_class: str = field(metadata=_about(engine=True))
    backend: str = field(metadata=_about())
    time_limit_minutes: int = field(metadata=_about(engine=True))
    work: dict = field(metadata=_about())
    # The fallback opt-in: a wider topology accepted after waiting (scheduling.services.admission).
    fallback_topology: str = field(default="", metadata=_about(engine=True, group="fallback"))
    fallback_after_minutes: int | None = field(default=None, metadata=_about(engine=True, group="fallback"))
    # tenancy.models.Project, or None: the department's own work.
    project: Any = field(default=None, metadata=_about(relation=True, engine=True))
    # MIG slices instead of whole GPUs (scheduling.slices; `gpus` is then 0): the profile, how many, and the
    # memory size asked for when the profile was chosen by it. The pass places slice jobs itself
    # (scheduling.services.slices), not the engine.
    mig_profile: str = field(default="", metadata=_about())
    mig_slices: int = field(default=0, metadata=_about())
    mig_memory_gb: int | None = field(default=None, metadata=_about())

    FIELDS: ClassVar[tuple[str, ...]]  # the field names, in order
    COLUMNS: ClassVar[tuple[str, ...]]  # their Job columns (attnames: department_id, ...)
    ENGINE_COLUMNS: ClassVar[tuple[str, ...]]  # the columns the engine reads of a pending job

    @classmethod
    def from_job(cls, job, **changes) -> JobSpec:
        """The spec `job` (a Job, or any object with these attributes) was submitted with; `changes`
        replace some (a resubmission under another project)."""
        return cls(**{**{name: getattr(job, name) for name in cls.FIELDS}, **changes})

    def as_model_kwargs(self) -> dict[str, Any]:
        """The Job fields this spec sets ({name: value}; relations as the objects given)."""
        return {name: getattr(self, name) for name in self.FIELDS}

    def fingerprint_material(self) -> dict[str, Any]:
        """What makes two submissions the same job, as plain JSON values (scheduling.services.admission.
        submission_fingerprint hashes it with the department's pk).

        Its form is stored (Job.idempotency_fingerprint, and migration 0007 computed it for older jobs):
        a required field under its name; a field with a default only when it is not the default; a group
        (the fallback) as the list of its values under its name, only when its first field is set;
        relations by pk.
        """
        material: dict[str, Any] = {}
        for spec_field in dataclasses.fields(self):
            group = spec_field.metadata["group"]
            if group:
                if group not in material and self._set(_GROUPS[group][0]):
                    material[group] = [self._plain(name) for name in _GROUPS[group]]
            elif self._set(spec_field.name):
                material[spec_field.name] = self._plain(spec_field.name)
        return material

    def _set(self, name: str) -> bool:
        default = _DEFAULTS.get(name, dataclasses.MISSING)
        return default is dataclasses.MISSING or getattr(self, name) != default

    def _plain(self, name: str) -> Any:
        value = getattr(self, name)
        return getattr(value, "pk", value) if name in _RELATIONS and value is not None else value


_FIELDS = dataclasses.fields(JobSpec)
_RELATIONS = frozenset(f.name for f in _FIELDS if f.metadata["relation"])
_DEFAULTS = {f.name: f.default for f in _FIELDS if f.default is not dataclasses.MISSING}
_GROUPS: dict[str, tuple[str, ...]] = {}
for _field in _FIELDS:
    if _field.metadata["group"]:
        _GROUPS.setdefault(_field.metadata["group"], ())
        _GROUPS[_field.metadata["group"]] += (_field.name,)
JobSpec.FIELDS = tuple(f.name for f in _FIELDS)
JobSpec.COLUMNS = tuple(f"{f.name}_id" if f.metadata["relation"] else f.name for f in _FIELDS)
JobSpec.ENGINE_COLUMNS = tuple(
    column for f, column in zip(_FIELDS, JobSpec.COLUMNS, strict=True) if f.metadata["engine"]
)
