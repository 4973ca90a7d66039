"""The local services of a live benchmark run: a noida-db broker and the registry emulator."""

from __future__ import annotations

from pathlib import Path


class Stack:
    """Broker + registry emulator for one benchmark run."""

    def __init__(self, root: Path):
        from router.devstack.broker import LocalBroker, client_config
        from router.devstack.registry_server import RegistryServer

        self.root = root
        self.broker = LocalBroker(data_dir=str(root / "broker"), tied_to_parent=True)
        self.registry = RegistryServer(data_file=str(root / "registry.json"))
        self._client_config = client_config

    def __enter__(self):
        self.bootstrap = self.broker.start()
        self.registry_url = self.registry.start()
        self.conf = {k: str(v) for k, v in self._client_config(self.bootstrap).items()}
        self.client = {k: v for k, v in self.conf.items() if k != "bootstrap.servers"}
        return self

    def __exit__(self, *exc):
        self.registry.stop()
        self.broker.stop(remove_data=True)
