"""kombu's filesystem transport, with each message written whole before a reader can see it.

kombu's own writes a message in place in the queue folder (create, then write), and a
reader takes any file it lists (a move, then a read): one it takes between the two is
empty, and the worker dies of a JSONDecodeError (kombu issue 1551; it ended a CI run's
Celery worker in ``tests/celery_pool/test_blocking_loop.py``). Here a message is written
under a name no reader takes (a dot first), then renamed into place, which a reader sees
whole or not at all. Every app on a filesystem broker uses it, workers' and clients'
alike: the tests' (``celery_proj``, ``celery_support.client``) and the benchmark
harness's (``benchmarks/celery_pool``: ``app``, the ``lock_holder_killed`` scenario).

It lives here, not in benchmarks/, because the sdist ships tests/ and not benchmarks/:
the tests import it from the sdist too, and the harness, which runs from a checkout only,
finds it beside itself there (tests/project/test_sdist.py).
"""

from __future__ import annotations

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        """Put ``payload`` onto ``queue``: written aside, then renamed into place."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        staged = os.path.join(self.data_folder_out, f".{name}.part")  # no reader's name
        try:
            with open(staged, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(staged, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel


# What an app's ``broker_transport`` names: a path, not the class (``inspect stats``
# sends the connection's transport as JSON).
TRANSPORT = f"{__name__}:Transport"
