"""AspError: the one exception the SDK raises for anything ASP reports or detects."""


class AspError(Exception):
    """An ASP error.

    ``code`` is the protocol's error code (``"not_found"``, ``"invalid_argument"``,
    ``"transport_error"``, ... the list is ``asp.ERROR_CODES``); ``message`` says what
    failed and what to do. ``errno`` and ``path`` are set when the responder gave them.
    """

    def __init__(self, code, message, errno=None, path=None):
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.errno = errno
        self.path = path

    def __str__(self):
        return "%s: %s" % (self.code, self.message)

    def __repr__(self):
        return "AspError(%r, %r)" % (self.code, self.message)
