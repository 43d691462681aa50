"""What every layer above the records may use: errors a user can act on (:mod:`.errors`), output
paths checked before work starts (:mod:`.outputs`), bounded waits on outside services
(:mod:`.services`), child processes that die with their parent (:mod:`.child_guard`), device,
precision and rank (:mod:`.runtime`), how a role method is split across workers
(:mod:`.dispatch`) and ``'module:attr'`` strings (:mod:`.targets`). Imports nothing heavy."""
