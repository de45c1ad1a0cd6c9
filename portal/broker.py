"""The filesystem broker `make run` uses (kombu's `filesystem://`, a broker that needs no server), with each
message written whole before a consumer can see it.

kombu's filesystem transport creates a message's file under its final name, then writes it; the worker
polling the folder may claim the file in between and read nothing, and the `JSONDecodeError` stops the
worker (kombu issue 1551; seen in `make run` within minutes, the beat queueing a task every 5 s, and
scripts/run.sh then stops the portal with it). Here a message is written under a name no consumer takes
(`<name>.msg.part`: a consumer takes only `<queue>.msg`) and renamed into place, atomic on one file system.
Reading, claiming by rename and the folders are kombu's (portal.settings names them).
"""

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

PART = ".part"


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        """Put `payload` onto `queue`: written under a name no consumer takes, then renamed to kombu's."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"  # kombu's name: FIFO by time
        final = os.path.join(self.data_folder_out, name)
        partial = final + PART
        try:
            with open(partial, "wb", buffering=0) as file:
                file.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
