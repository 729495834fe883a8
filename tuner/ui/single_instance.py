"""Single instance through a named local socket (``QLocalServer`` / ``QLocalSocket``).

The first instance listens on a name derived from the user's data folder; a second launch
connects, sends ``show``, and exits 0; the first brings its window forward.
"""

from __future__ import annotations

import hashlib
import os

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

from tuner import paths

MESSAGE_SHOW = b"show\n"


def instance_name() -> str:
    """Socket name unique per user and per ``DRAFTWISE_HOME`` (so tests never meet a real instance)."""
    key = f"{os.getuid() if hasattr(os, 'getuid') else os.environ.get('USERNAME', '')}:{paths.data_dir()}"
    return "draftwise-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def notify_running_instance(name: str | None = None, timeout_ms: int = 1000) -> bool:
    """Ask an already running instance to show its window.

    Returns:
        True when an instance answered (the caller should exit 0), False when none runs.
    """
    sock = QLocalSocket()
    sock.connectToServer(name or instance_name())
    if not sock.waitForConnected(timeout_ms):
        return False
    sock.write(MESSAGE_SHOW)
    sock.flush()
    sock.waitForBytesWritten(timeout_ms)
    sock.disconnectFromServer()
    return True


class InstanceServer(QObject):
    """Listens for later launches; emits :attr:`show_requested` when one asks to show the window.

    Raises:
        RuntimeError: from :meth:`listen` when the socket cannot be created (names the socket).
    """

    show_requested = Signal()

    def __init__(self, name: str | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = name or instance_name()
        self._server = QLocalServer(self)
        self._server.newConnection.connect(self._on_connection)

    def listen(self) -> None:
        """Start listening; a stale socket left by a crashed instance is removed first."""
        if not self._server.listen(self.name):
            QLocalServer.removeServer(self.name)
            if not self._server.listen(self.name):
                raise RuntimeError(f"cannot listen on local socket {self.name!r}: {self._server.errorString()}")

    def close(self) -> None:
        """Stop listening."""
        self._server.close()

    def _on_connection(self) -> None:
        while self._server.hasPendingConnections():
            sock = self._server.nextPendingConnection()
            sock.readyRead.connect(lambda s=sock: self._on_ready(s))
            sock.disconnected.connect(sock.deleteLater)
            if sock.bytesAvailable():
                self._on_ready(sock)

    def _on_ready(self, sock: QLocalSocket) -> None:
        data = sock.readAll().data()
        if b"show" in data:
            self.show_requested.emit()
