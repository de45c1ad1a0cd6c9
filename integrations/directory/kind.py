"""The directory target: every rendered file (Slurm, Kubernetes YAML, NFS exports, OpenSM partitions)
written to a folder as versions, `current` switched atomically. The embedded default of `make run`."""

from pathlib import PurePosixPath

from django.utils.translation import gettext, gettext_noop

from integrations import fields as f
from integrations.common import display_path
from integrations.directory.adapter import DirectoryAdapter, directory_path
from integrations.registry import Kind, Setting, register

# The operating system's own directories: a push writes `versions/` and a `current` link into the folder.
SYSTEM_DIRECTORIES = (
    *("/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64"),
    *("/proc", "/root", "/run", "/sbin", "/sys", "/usr"),
)


def path_error(path: str) -> str | None:
    """Why `path` cannot be a directory target's folder; None when it can."""
    if "\x00" in path:
        return "must not contain NUL"
    pure = PurePosixPath(path)
    if ".." in pure.parts:
        return "must not contain `..`: give the folder itself (absolute, or relative to var/)"
    if pure.is_absolute() and any(
        pure == PurePosixPath(system) or (system != "/" and pure.is_relative_to(system))
        for system in SYSTEM_DIRECTORIES
    ):
        return f"{path} is a system directory: choose a folder of its own (e.g. /srv/rackplane/rendered)"
    return None


def clean(values: dict, errors: dict) -> dict:
    path = f.text(values["path"], "path", errors)  # the text rule first: control characters, lengths
    if "path" not in errors and (why := path_error(path)) is not None:
        errors["path"] = why
    return {"path": path, "keep": f.integer(values["keep"], "keep", errors, 1, 100) or 5}


KIND = register(
    Kind(
        name="directory",
        label=gettext_noop("Directory (rendered files)"),
        settings=(
            Setting(
                "path",
                "",
                f.text_field(
                    gettext_noop("Directory"),
                    gettext_noop(
                        "Absolute, or relative to var/. Empty: var/rendered (RACKPLANE_RENDER_DIR)."
                    ),
                ),
            ),
            Setting(
                "keep", 5, f.number_field(gettext_noop("Previous versions kept"), gettext_noop("Default 5."))
            ),
        ),
        clean=clean,
        adapter=DirectoryAdapter,
        payload=lambda rendered, values: {"files": rendered.files()},
        summary=lambda values: display_path(directory_path(values)),
        what_to_do=(
            "check that the directory is writable by the portal and has free space, then retry the push"
        ),
        order=10,
        uses=lambda facts, settings: gettext("files written to a folder (the embedded default)"),
    )
)
