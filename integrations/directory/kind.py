"""The directory target: every rendered file (Slurm, Kubernetes YAML, NFS exports, OpenSM partitions)
written to a folder as versions, `current` switched atomically. The embedded default of `make run`."""

from integrations import fields as f
from integrations.common import display_path
from integrations.directory.adapter import DirectoryAdapter, directory_path
from integrations.registry import Kind, Setting, register


def clean(values: dict, errors: dict) -> dict:
    path = f.text(values["path"], "path", errors)
    if "\x00" in path:
        errors["path"] = "must not contain NUL"
    return {"path": path, "keep": f.integer(values["keep"], "keep", errors, 1, 100) or 5}


KIND = register(
    Kind(
        name="directory",
        label="Directory (rendered files)",
        settings=(
            Setting(
                "path",
                "",
                f.text_field(
                    "Directory", "Absolute, or relative to var/. Empty: var/rendered (RACKPLANE_RENDER_DIR)."
                ),
            ),
            Setting("keep", 5, f.number_field("Previous versions kept", "Default 5.")),
        ),
        clean=clean,
        adapter=DirectoryAdapter,
        payload=lambda rendered, values: {"files": rendered.files()},
        summary=lambda values: display_path(directory_path(values)),
        what_to_do=(
            "check that the directory is writable by the portal and has free space, then retry the push"
        ),
        order=10,
        uses=lambda facts, settings: "files written to a folder (the embedded default)",
    )
)
