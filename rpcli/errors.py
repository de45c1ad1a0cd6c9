"""What `rp` exits with, and the one error every command raises to stop with a message and a code.

The codes are part of the interface: scripts test them (`rp --help` and docs/api/rp.md list them).
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0
    JOB_UNSUCCESSFUL = 1  # `rp watch`: the job ended failed or cancelled
    USAGE = 2  # bad arguments, an input file or URL refused, the config file unsafe or unreadable
    AUTH = 3  # not logged in, the token refused (401), or not allowed (403)
    NOT_FOUND = 4  # no such job (or one you may not see), or nothing to show
    REFUSED = 5  # the API refused the request (another 4xx): its message is shown
    SERVER = 6  # a server error (5xx), no answer, or an answer that is not the API's JSON
    TIMEOUT = 7  # `rp watch --timeout`: the job had not ended in time
    INTERRUPTED = 130  # Ctrl-C


EXIT_CODES_HELP = """\
exit codes:
  0  success
  1  rp watch: the job ended failed or cancelled
  2  usage: bad arguments, a refused URL or input file, an unsafe or unreadable config file
  3  authentication: not logged in, the token refused (401) or the action not allowed (403)
  4  not found: no such job, or one you may not see (404); no logs to show
  5  refused by the API (another 4xx, e.g. 400 or 422): its message is shown
  6  server or network: a 5xx, no answer, a timeout, or an answer that is not the API's JSON
  7  rp watch --timeout: the job had not ended in time
130  interrupted (Ctrl-C)"""


class RpError(Exception):
    """Stop the command: `message` to stderr (in words, never a traceback) and exit with `code`."""

    def __init__(self, code: Exit, message: str):
        super().__init__(message)
        self.code = code
        self.message = message
