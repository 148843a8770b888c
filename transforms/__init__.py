"""Pure ``DataFrame -> DataFrame`` transforms and Column helpers (Spark built-ins only).

The semantics transforms (priority, deliverAt/expireAt, states, dead-lettering) live here;
they take the evaluation time as a parameter and never read the clock or do I/O.
"""
