"""P3 broken for power loss: temp file + rename, but no fsync of the file or the directory.

Survives a killed process (the page cache keeps every completed write) but not power
loss: the renamed file's data may never have reached the disk.
"""
import os

from .. import storage
from ..agent import Agent
from ..checkpoint import CheckpointStore


class NoFsyncStore(CheckpointStore):
    def save(self, checkpoint):
        tmp = self.path.with_name(self.path.name + storage.TMP_SUFFIX)
        with open(tmp, "wb") as f:
            f.write(storage.encode_json(checkpoint.to_json()))
        os.replace(tmp, self.path)


class RenameWithoutFsyncAgent(Agent):
    checkpoint_store = NoFsyncStore


def make_agent(env):
    return RenameWithoutFsyncAgent(env)
