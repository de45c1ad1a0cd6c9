"""WhiteNoise, serving the portal's static files, with one-byte ranges answered.

WhiteNoise 6.12 answers 416 to a valid one-byte range (`Range: bytes=0-0`, `bytes=5-5`, the last byte
`bytes=-1`): `StaticFile.get_range_response` refuses `start >= end`, though the end of a byte range is
inclusive (RFC 9110 14.1.2), so `start == end` is one byte (evansd/whitenoise#711, open). Browsers and media
players send such probes. Here that one case gets its 206 and its byte, through WhiteNoise's own pieces
(`SlicedFile`, `Response`); every other range, and everything else, is WhiteNoise's. Drop this module when
WhiteNoise answers it itself (tests/portal/test_static_files.py then fails, saying so).
"""

from http import HTTPStatus

from whitenoise.middleware import WhiteNoiseMiddleware
from whitenoise.responders import Response, SlicedFile, StaticFile


class StaticFileWithOneByteRanges(StaticFile):
    def get_range_response(self, range_header, base_headers, file_handle):
        size = next(int(value) for name, value in base_headers if name == "Content-Length")
        start, end = self.get_byte_range(range_header, size)
        if start != end:  # an empty file's 0-0 too (end -1): WhiteNoise's 416
            return super().get_range_response(range_header, base_headers, file_handle)
        headers = [(name, value) for name, value in base_headers if name != "Content-Length"]
        headers += [("Content-Range", f"bytes {start}-{end}/{size}"), ("Content-Length", "1")]
        body = SlicedFile(file_handle, start, end) if file_handle is not None else None
        return Response(HTTPStatus.PARTIAL_CONTENT, headers, body)


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """`whitenoise.middleware.WhiteNoiseMiddleware` with `StaticFileWithOneByteRanges` for every file (the
    finders' in DEBUG included: each file WhiteNoise serves is made by `get_static_file`)."""

    def get_static_file(self, path, url, stat_cache=None):
        static_file = super().get_static_file(path, url, stat_cache=stat_cache)
        static_file.__class__ = StaticFileWithOneByteRanges  # the same object, one method answering more
        return static_file
