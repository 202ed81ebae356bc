# SPDX-License-Identifier: Apache-2.0
"""Fault: the outcome of one simulated access."""
from ._pb import pb


class Fault:
    """The outcome of one access (FaultInfo) with readable names."""

    def __init__(self, info):
        self.info = info
        self.outcome_name = pb.FaultOutcome.Name(info.outcome).removeprefix("FAULT_OUTCOME_").lower()
        self.lock_path = pb.LockPath.Name(info.lock_path).removeprefix("LOCK_PATH_").lower()
        self.si_code = pb.SiCode.Name(info.si_code) if info.si_code else None
        self.si_addr = info.si_addr

    @property
    def signal(self):
        """"SIGSEGV" / "SIGBUS" if the access raised one, else None."""
        return {pb.FAULT_OUTCOME_SIGSEGV: "SIGSEGV", pb.FAULT_OUTCOME_SIGBUS: "SIGBUS"}.get(self.info.outcome)

    def __repr__(self):
        return f"Fault({self.outcome_name}, lock_path={self.lock_path}, si_code={self.si_code})"
