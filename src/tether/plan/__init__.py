"""What a run would do before it does it: the memory model, parameter counts from configs, and
``--dry-run``'s plan."""

from tether.plan.dry_run import Plan, dry_run

__all__ = ["Plan", "dry_run"]
