"""The commands of `rp`: each takes the parsed arguments and returns its exit code (or raises RpError)."""

from __future__ import annotations

import argparse
import datetime
import getpass
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from rpcli import config, output, spec
from rpcli.api import Api, printable
from rpcli.errors import Exit, RpError

MAX_INPUT_BYTES = 4 * 1024 * 1024  # the API refuses bodies over 4 MiB (core/parsers.py)
MAX_WATCH_INTERVAL = 15.0
BACKOFF = 1.5


def _api() -> Api:
    return Api(config.load())


def _not_found(job_id: int) -> str:
    return f"no job {job_id} (or none you may see): `rp ls` lists yours"


# --- login / logout ---------------------------------------------------------------------------------------


def login(args: argparse.Namespace) -> int:
    url = args.url
    if url is None:
        try:
            url = config.load().url
        except RpError:
            raise RpError(
                Exit.USAGE, "give the portal's address: rp login --url https://your-portal"
            ) from None
    url = config.check_url(url)
    if args.token_stdin:
        raw = sys.stdin.readline(config.MAX_TOKEN + 2)
    else:
        print(f"Make a personal API token on {url}/account/tokens/ and paste it here.", file=sys.stderr)
        try:
            raw = getpass.getpass("API token (rpt_...): ")
        except EOFError:
            raise RpError(
                Exit.USAGE, "no token given (give it on standard input with --token-stdin)"
            ) from None
    token = config.check_token(raw)
    if config.is_plain_http_elsewhere(url):
        print(
            f"rp: warning: {url} is plain http to another machine: the token crosses the network unencrypted",
            file=sys.stderr,
        )
    fresh = config.Config(url, token)
    with Api(fresh) as api:  # verify before saving: a refused token is never written
        departments = [d.get("slug") for d in api.pages(spec.path("departments_list"), limit=50)]
    path = config.save(fresh)
    names = ", ".join(printable(str(slug), 100) for slug in departments) or "none yet"
    print(f"Logged in to {url} (your departments: {names}). Token saved to {path} (mode 0600).")
    return Exit.OK


def logout(args: argparse.Namespace) -> int:
    path = config.remove()
    if path is None:
        print(f"Not logged in (no {config.config_path()}).")
    else:
        print(
            f"Logged out: removed {path}. The token itself still works until it expires: revoke it on the "
            "portal's API tokens page (/account/tokens/) if you no longer need it."
        )
    return Exit.OK


# --- submit -----------------------------------------------------------------------------------------------


def read_input(path: str) -> str:
    """A script file (or `-`: standard input) as text: at most MAX_INPUT_BYTES, UTF-8, no NUL byte."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            with open(path, "rb") as handle:
                data = handle.read(MAX_INPUT_BYTES + 1)
    except OSError as error:
        raise RpError(Exit.USAGE, f"cannot read {path}: {error.strerror or error}") from error
    if len(data) > MAX_INPUT_BYTES:
        raise RpError(
            Exit.USAGE, f"{path} is over {MAX_INPUT_BYTES // (1024 * 1024)} MiB: too large for a job script"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RpError(
            Exit.USAGE, f"{path} is not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})"
        ) from error
    if "\x00" in text:
        raise RpError(Exit.USAGE, f"{path} holds a NUL byte: it is not a script")
    if not text:
        raise RpError(Exit.USAGE, f"{path} is empty")
    return text


def _env_pairs(items: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise RpError(Exit.USAGE, f"--env takes NAME=VALUE, not {item!r}")
        env[name] = value
    return env


def _default_name(args: argparse.Namespace) -> str:
    if args.image:
        last = args.image.rsplit("/", 1)[-1]
        return last.split("@")[0].split(":")[0] or "job"
    if args.script and args.script != "-":
        return Path(args.script).stem or "job"
    return "job"


def _only_department(api: Api) -> str:
    slugs = [d.get("slug") for d in api.pages(spec.path("departments_list"), limit=50)]
    if len(slugs) == 1 and isinstance(slugs[0], str):
        return slugs[0]
    if not slugs:
        raise RpError(
            Exit.REFUSED, "you are in no department: a department's lead or an admin adds you to one"
        )
    raise RpError(
        Exit.USAGE,
        "you are in several departments: name one with --department (" + ", ".join(map(str, slugs)) + ")",
    )


def submission_body(args: argparse.Namespace) -> dict[str, Any]:
    """The JobSubmit body from the arguments (without the department when none was given)."""
    if bool(args.script) == bool(args.image):
        raise RpError(
            Exit.USAGE, "give a script file (or - for standard input) or --image, not both or neither"
        )
    if args.script and (args.command or args.arg or args.env):
        raise RpError(Exit.USAGE, "--command, --arg and --env go with --image (a script carries its own)")
    if args.script:
        work: dict[str, Any] = {"script": read_input(args.script)}
        backend = args.backend or "slurm"
    else:
        work = {"image": args.image}
        if args.command:
            work["command"] = args.command
        if args.arg:
            work["args"] = args.arg
        if args.env:
            work["env"] = _env_pairs(args.env)
        backend = args.backend or "kubernetes"
    if args.mig_slices is not None and args.gpus is not None:
        raise RpError(Exit.USAGE, "--mig-slices goes with --mig-profile or --mig-memory-gb, not --gpus")
    body: dict[str, Any] = {"name": args.name or _default_name(args), "backend": backend, "work": work}
    optional = {
        "gpus": args.gpus,
        "mig_profile": args.mig_profile,
        "mig_memory_gb": args.mig_memory_gb,
        "mig_slices": args.mig_slices,
        "department": args.department,
        "project": args.project,
        "topology": args.topology,
        "fallback_topology": args.fallback_topology,
        "fallback_after_minutes": args.fallback_after,
        "priority_class": args.priority_class,
        "time_limit_minutes": args.time_limit,
    }
    body.update({key: value for key, value in optional.items() if value is not None})
    return body


def submit(args: argparse.Namespace) -> int:
    body = submission_body(args)
    key = args.idempotency_key or str(uuid.uuid4())
    if not (key.isascii() and key.isprintable()) or len(key) > 200:
        raise RpError(
            Exit.USAGE, "--idempotency-key takes up to 200 printable ASCII characters (e.g. a UUID)"
        )
    with _api() as api:
        if "department" not in body:
            body["department"] = _only_department(api)
        try:
            job = api.post(
                spec.path("jobs_create"),
                body,
                headers={spec.IDEMPOTENCY_HEADER: key},
                retry=True,  # the key makes a resent submission return the first job
            )
        except RpError as error:
            if error.code == Exit.SERVER:
                error.message += (
                    ". It may have been made all the same: run the same command with "
                    f"--idempotency-key {key} to get that job without making a second one."
                )
            raise
        again = api.last_status == 200
    if not isinstance(job, dict) or "id" not in job:
        raise RpError(Exit.SERVER, "the portal's answer to the submission names no job")
    if args.json:
        output.as_json(job)
        return Exit.OK
    if again:
        print(f"Job {job['id']} was already made with Idempotency-Key {key}: no second job was made.")
    else:
        print(f"Submitted job {job['id']} ({cell_state(job)}). Idempotency-Key: {key}")
    print(f"Follow it with: rp watch {job['id']}")
    return Exit.OK


def cell_state(job: dict) -> str:
    state = str(job.get("state", "?"))
    reason = job.get("pending_reason")
    shown = output.moments_in_zone(str(reason)) if reason else ""
    return f"{state}: {printable(shown, 300)}" if state == "pending" and reason else state


# --- reading ----------------------------------------------------------------------------------------------


def ls(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"page_size": spec.PAGE_SIZE}
    if args.state:
        params["state"] = args.state
    for name in ("department", "project", "name", "backend"):
        if getattr(args, name):
            params[name] = getattr(args, name)
    with _api() as api:
        jobs = list(api.pages(spec.path("jobs_list"), params, limit=args.limit))
    if args.json:
        output.as_json(jobs)
        return Exit.OK
    if not jobs:
        print("No jobs.")
        return Exit.OK
    output.table(
        ["ID", "NAME", "DEPARTMENT", "PROJECT", "GPUS", "STATE", "BACKEND", "BY", "CREATED"],
        (
            [
                j.get("id"),
                j.get("name"),
                j.get("department"),
                j.get("project"),
                job_size(j, TIMES),
                j.get("state"),
                j.get("backend"),
                j.get("submitted_by"),
                output.when(j.get("created_at")),
            ]
            for j in jobs
        ),
    )
    return Exit.OK


# The multiplication sign, as the portal writes a slice job's size (2, the sign, 1g.23gb).
TIMES = "\N{MULTIPLICATION SIGN}"


def job_size(job: dict, times: str = f" {TIMES} ") -> object:
    """What a job asks for, as the portal shows it (scheduling/_job_size.html): its whole GPUs, or its MIG
    slices of one profile ("1 x 1g.23gb" with the multiplication sign; its `gpus` is then 0)."""
    if job.get("mig_slices"):
        return f"{job.get('mig_slices')}{times}{job.get('mig_profile')}"
    return job.get("gpus")


def _size_pair(job: dict) -> tuple[str, object]:
    """`rp show`'s line of what the job asks for: "gpus", or "mig slices" with the profile and count (and
    the memory asked for, when a size was named instead of a profile), as the job page shows them."""
    if not job.get("mig_slices"):
        return ("gpus", job.get("gpus"))
    size = str(job_size(job))
    if job.get("mig_memory_gb"):
        size += f" (asked: {job.get('mig_memory_gb')} GB each)"
    return ("mig slices", size)


def _get_job(api: Api, job_id: int) -> dict:
    job = api.get(spec.path("jobs_retrieve", id=job_id), not_found=_not_found(job_id))
    if not isinstance(job, dict) or "state" not in job:
        raise RpError(Exit.SERVER, f"the portal's answer for job {job_id} is not a job")
    return job


def show(args: argparse.Namespace) -> int:
    with _api() as api:
        job = _get_job(api, args.job)
    if args.json:
        output.as_json(job)
        return Exit.OK
    fields = [
        ("id", job.get("id")),
        ("name", job.get("name")),
        ("state", cell_state(job)),
        ("department", job.get("department")),
        ("project", job.get("project")),
        ("submitted by", job.get("submitted_by")),
        _size_pair(job),
        ("topology", job.get("topology")),
        ("priority class", job.get("priority_class")),
        ("backend", job.get("backend")),
        ("backend id", job.get("backend_id")),
        ("backend message", output.moments_in_zone(job.get("backend_message"))),
        ("time limit", f"{job.get('time_limit_minutes')} min"),
        ("over quota", job.get("over_quota")),
        ("placement", job.get("placement")),
        ("exit code", job.get("exit_code")),
        ("preemptions", job.get("preemptions")),
        ("created", output.when(job.get("created_at"))),
        ("started", output.when(job.get("started_at"))),
        ("finished", output.when(job.get("finished_at"))),
    ]
    output.pairs(fields)
    events = job.get("events") or []
    if isinstance(events, list) and events:
        print("\nEvents:")
        output.table(
            ["AT", "KIND", "MESSAGE"],
            (
                [output.when(e.get("at")), e.get("kind"), output.moments_in_zone(e.get("message"))]
                for e in events
                if isinstance(e, dict)
            ),
        )
    return Exit.OK


def cancel(args: argparse.Namespace) -> int:
    with _api() as api:
        job = api.post(spec.path("jobs_cancel", id=args.job), not_found=_not_found(args.job))
    if args.json:
        output.as_json(job)
    else:
        state = job.get("state") if isinstance(job, dict) else "?"
        print(f"Job {args.job}: {printable(str(state), 100)}.")
    return Exit.OK


# --- watch ------------------------------------------------------------------------------------------------


def _parse_time(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def progress(job: dict, now: datetime.datetime | None = None) -> str:
    """One line: the state, and for a running job how long it has run of its time limit and where."""
    now = now or datetime.datetime.now(datetime.UTC)
    state = str(job.get("state"))
    words = f"job {job.get('id')} {cell_state(job)}"
    started = _parse_time(job.get("started_at"))
    if state in ("starting", "running") and started:
        ran = (now - started).total_seconds()
        limit = job.get("time_limit_minutes")
        words += f" for {_duration(ran)}"
        if isinstance(limit, int) and limit > 0:
            words += f" of {limit} min ({min(100, int(100 * ran / (limit * 60)))}%)"
        if job.get("placement"):
            words += " on " + output.cell(job.get("placement"))
    elif state in spec.FINAL_STATES:
        if job.get("exit_code") is not None:
            words += f" with exit code {job.get('exit_code')}"
        if job.get("backend_message"):
            words += ": " + printable(str(job.get("backend_message")), 300)
    return words


def watch(args: argparse.Namespace) -> int:
    tty = sys.stdout.isatty() and not args.json
    started = time.monotonic()
    delay = args.interval
    last: tuple | None = None
    with _api() as api:
        while True:
            job = _get_job(api, args.job)
            state = job.get("state")
            key = (
                state,
                job.get("pending_reason"),
                tuple(job.get("placement") or ()),
                job.get("backend_message"),
            )
            changed, first = key != last, last is None
            last = key
            if args.json:
                if changed:
                    output.json_line(job)
            elif tty:
                # A terminal: the line of the current state is rewritten as the job runs (its time, its
                # share of the time limit); a new state starts a new line, so the story stays on screen.
                if changed and not first:
                    sys.stdout.write("\n")
                sys.stdout.write("\r\x1b[K" + time.strftime("%H:%M:%S %Z ") + progress(job))
                if state in spec.FINAL_STATES:
                    sys.stdout.write("\n")
                sys.stdout.flush()
            elif changed:
                print(time.strftime("%H:%M:%S %Z ") + progress(job), flush=True)
            if state in spec.FINAL_STATES:
                return Exit.OK if state == "completed" else Exit.JOB_UNSUCCESSFUL
            delay = args.interval if changed else min(delay * BACKOFF, max(args.interval, MAX_WATCH_INTERVAL))
            if args.timeout is not None:
                left = args.timeout - (time.monotonic() - started)
                if left <= 0:
                    if tty:
                        sys.stdout.write("\n")
                    raise RpError(Exit.TIMEOUT, f"job {args.job} is still {state} after {args.timeout:g} s")
                delay = min(delay, left)
            time.sleep(delay)


# --- logs -------------------------------------------------------------------------------------------------


class _LogFollower:
    """What is new in each stream since the last read. The API sends the end of each stream (and its size
    when the backend knows it): the new bytes are the growth in size; without a size, what follows the
    longest end of the text shown before that the new text begins with."""

    def __init__(self) -> None:
        self.sizes: dict[str, int] = {}
        self.texts: dict[str, str] = {}

    def new_text(self, part: dict) -> str:
        name, text, size = str(part.get("name")), str(part.get("text") or ""), part.get("size")
        before_size, before_text = self.sizes.get(name), self.texts.get(name)
        self.texts[name] = text
        if isinstance(size, int):
            self.sizes[name] = size
        if before_text is None:
            return text
        if isinstance(size, int) and before_size is not None:
            grown = size - before_size
            if grown == 0:
                return ""
            data = text.encode("utf-8")
            if grown < 0:  # the stream started again (rotated, a new pod)
                return text
            if grown > len(data):
                return f"[... {grown - len(data)} bytes not shown ...]\n" + text
            return data[-grown:].decode("utf-8", "replace")
        return text[_overlap(before_text, text) :]


def _overlap(before: str, after: str) -> int:
    """The length of the longest end of `before` that `after` begins with (Knuth-Morris-Pratt's prefix
    function over after + a separator + before: linear in their lengths)."""
    joined = after + "\uffff" + before
    prefix = [0] * len(joined)
    for i in range(1, len(joined)):
        k = prefix[i - 1]
        while k and joined[i] != joined[k]:
            k = prefix[k - 1]
        if joined[i] == joined[k]:
            k += 1
        prefix[i] = k
    return min(prefix[-1], len(after))


def _read_logs(api: Api, job_id: int) -> dict:
    logs = api.get(spec.path("jobs_logs", id=job_id), not_found=_not_found(job_id))
    if not isinstance(logs, dict) or not isinstance(logs.get("parts"), list):
        raise RpError(Exit.SERVER, f"the portal's answer for job {job_id}'s logs is not logs")
    return logs


def logs(args: argparse.Namespace) -> int:
    follower = _LogFollower()
    with _api() as api:
        while True:
            data = _read_logs(api, args.job)
            parts = [p for p in data["parts"] if isinstance(p, dict)]
            ended = data.get("state") in spec.FINAL_STATES
            if args.json and not args.follow:
                output.as_json(data)
            else:
                _print_new_output(args, follower, data, parts)
            if data.get("error") and not parts and (not args.follow or ended):
                raise RpError(Exit.NOT_FOUND, f"no logs for job {args.job}: {printable(str(data['error']))}")
            if parts and all(part.get("error") for part in parts) and (not args.follow or ended):
                # Not one stream could be read (each said why, above): nothing was printed.
                raise RpError(Exit.NOT_FOUND, f"no logs for job {args.job}: none of its streams was readable")
            if not args.follow or ended:
                return Exit.OK
            time.sleep(args.interval)


def _print_new_output(
    args: argparse.Namespace, follower: _LogFollower, data: dict, parts: list[dict]
) -> None:
    """What is new in each stream: raw text (under a `==> name <==` line when there are several streams), or
    one JSON line per stream with --json. A stream's error and a cut stream are said once, on stderr."""
    for part in parts:
        name = str(part.get("name"))
        first = name not in follower.texts
        if part.get("error"):
            if first:
                print(f"rp: {name}: {printable(str(part['error']))}", file=sys.stderr)
                follower.texts[name] = ""
            continue
        if first and part.get("truncated"):
            print(f"rp: {name}: only its last {data.get('limit_bytes', '?')} bytes", file=sys.stderr)
        text = follower.new_text(part)
        if not text:
            continue
        if args.json:
            output.json_line({"job": args.job, "stream": name, "text": text})
            continue
        if len(parts) > 1:
            sys.stdout.write(f"==> {name} <==\n")
        sys.stdout.write(text)
        sys.stdout.flush()


# --- quota ------------------------------------------------------------------------------------------------


def quota(args: argparse.Namespace) -> int:
    with _api() as api:
        departments = list(api.pages(spec.path("departments_list")))
        positions = []
        for department in departments:
            positions.append(api.get(spec.path("departments_quota", slug=department.get("slug"))))
        projects = list(api.pages(spec.path("projects_list")))
    if args.json:
        output.as_json({"departments": positions, "projects": projects})
        return Exit.OK
    if not positions:
        print("You are in no department.")
        return Exit.OK
    output.table(
        ["DEPARTMENT", "GUARANTEED", "LIMIT", "IN USE", "IN QUOTA", "BORROWED", "PENDING", "FAIR SHARE"],
        (
            [
                q.get("department"),
                q.get("guaranteed"),
                q.get("limit") if q.get("limit") is not None else "none",
                q.get("in_use"),
                q.get("in_quota"),
                q.get("borrowed"),
                q.get("pending_demand"),
                q.get("fair_share"),
            ]
            for q in positions
            if isinstance(q, dict)
        ),
    )
    if projects:
        print()
        output.table(
            ["DEPARTMENT", "PROJECT", "GUARANTEED", "LIMIT"],
            (
                [
                    p.get("department"),
                    p.get("slug"),
                    _project_guarantee(p),
                    p.get("limit_gpus") if p.get("limit_gpus") is not None else "none",
                ]
                for p in projects
            ),
        )
    return Exit.OK


def _project_guarantee(project: dict) -> object:
    """A named project's guarantee; the default project's is what the named ones leave of its department's
    ("24 (the rest)"), as the server computes it (effective_guaranteed_gpus) and the portal shows it."""
    if not project.get("is_default"):
        return project.get("guaranteed_gpus")
    effective = project.get("effective_guaranteed_gpus")
    if isinstance(effective, int) and not isinstance(effective, bool):
        return f"{effective} (the rest)"
    return "the rest"  # a server from before the field
