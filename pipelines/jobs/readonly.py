"""Read-only SQL: a statement may read the lake's own tables and views, and nothing else.

An allowlist, decided before anything runs:

1. On the **parsed** plan (``spark.sql`` would run a command at once, and analysing a query over
   a file path already lists and reads that path): every node of the statement, its CTEs and
   its subqueries must be a query operator (``SELECT``, ``WITH``, joins, set operations,
   ``VALUES``, windows, generators...) or a read-only command (``SHOW``, ``DESCRIBE``,
   ``EXPLAIN`` of an allowed statement); every relation must name one of the lake's tables or
   views (time travel on them included), with no read options; a table-valued function must be
   one that only makes rows (``range``, ``explode``...); every function must be a built-in and
   not one that reaches outside SQL (``java_method``, ``reflect``, ``try_reflect``).
2. On the **analysed** plan of a query: every leaf is a lake table, a literal relation or a
   range, and no expression is a user-defined function or a reflective call.

Everything else is refused with :class:`~msglake.errors.QueryRefused`, naming what was refused.
The session queries run in (:func:`read_only_session`) also has ``spark.sql.runSQLOnFiles`` and
SQL scripting off, so a file relation cannot come back through a configuration.
"""
from __future__ import annotations

from msglake.errors import QueryError, QueryRefused

#: Parsed-plan nodes of a query: they compute rows from their children and write nothing.
QUERY_NODES = frozenset("""
    Project Filter Aggregate Join LateralJoin Union Intersect Except Sort GlobalLimit LocalLimit Offset Tail
    Distinct Deduplicate SubqueryAlias UnresolvedWith UnresolvedRelation RelationTimeTravel LocalRelation
    OneRowRelation UnresolvedInlineTable Window WithWindowDefinition Generate Pivot Unpivot Sample
    RepartitionByExpression Repartition RebalancePartitions UnresolvedHaving UnresolvedSubqueryColumnAliases
    UnresolvedTableValuedFunction UnresolvedTVFAliases UnresolvedHint Expand PipeOperator
""".split())

#: Commands that only show what the catalog or a plan holds. Their names are checked like
#: relations (DESCRIBE of a file path is refused).
READ_COMMANDS = frozenset("""
    ShowTables ShowTablesExtended ShowViews ShowColumns ShowCreateTable ShowTableProperties ShowPartitions
    ShowFunctions ShowNamespaces ShowNamespacesCommand DescribeRelation DescribeColumn DescribeNamespace DescribeFunction
    DescribeDeltaDetailCommand DescribeDeltaHistory UnresolvedTableOrView UnresolvedTable UnresolvedView
    UnresolvedNamespace UnresolvedFunctionName CurrentNamespace ResolvedNamespace
""".split())

#: Table-valued functions that only make rows from their arguments (no path, no source).
ROW_FUNCTIONS = frozenset("""
    range explode explode_outer inline inline_outer posexplode posexplode_outer json_tuple stack
""".split())

#: Built-in functions that reach outside SQL: Java methods by reflection.
OUTSIDE_FUNCTIONS = frozenset({"java_method", "reflect", "try_reflect"})

#: Leaves an analysed query may have besides the lake's tables (a CTE reference: its definition is
#: checked where it stands, under WithCTE).
LITERAL_LEAVES = frozenset({"LocalRelation", "OneRowRelation", "Range", "CTERelationRef"})

#: What a user wrote, for the refusal message, by parsed-plan node.
STATEMENTS = {
    "InsertIntoStatement": "INSERT", "InsertIntoDir": "INSERT OVERWRITE DIRECTORY", "DeleteFromTable": "DELETE",
    "UpdateTable": "UPDATE", "MergeIntoTable": "MERGE", "CreateTableAsSelect": "CREATE TABLE ... AS SELECT",
    "ReplaceTableAsSelect": "REPLACE TABLE ... AS SELECT", "CreateTable": "CREATE TABLE", "DropTable": "DROP TABLE",
    "CreateView": "CREATE VIEW", "CreateViewStatement": "CREATE VIEW", "CreateTempViewUsing": "CREATE VIEW",
    "DropView": "DROP VIEW", "AlterTableCommand": "ALTER TABLE", "CacheTable": "CACHE TABLE",
    "CacheTableAsSelect": "CACHE TABLE", "UncacheTable": "UNCACHE TABLE", "RefreshTable": "REFRESH",
    "RefreshResource": "REFRESH", "AddJarsCommand": "ADD JAR", "AddFilesCommand": "ADD FILE",
    "AddArchivesCommand": "ADD ARCHIVE", "SetCommand": "SET", "ResetCommand": "RESET",
    "UnresolvedExecuteImmediate": "EXECUTE IMMEDIATE", "ExecuteImmediateQuery": "EXECUTE IMMEDIATE",
    "CompoundBody": "a SQL script (BEGIN ... END)", "RestoreTableStatement": "RESTORE",
    "CloneTableStatement": "CREATE TABLE ... CLONE", "OptimizeTableCommand": "OPTIMIZE",
    "VacuumTableCommand": "VACUUM", "ConvertToDeltaCommand": "CONVERT TO DELTA", "CreateFunction": "CREATE FUNCTION",
    "CreateUserDefinedFunction": "CREATE FUNCTION", "DropFunction": "DROP FUNCTION", "TruncateTable": "TRUNCATE",
    "PlanWithUnresolvedIdentifier": "IDENTIFIER() with a computed name", "CreateFunctionCommand": "CREATE FUNCTION",
    "CreateViewCommand": "CREATE VIEW", "AddColumns": "ALTER TABLE", "ReplaceColumns": "ALTER TABLE",
    "DropColumns": "ALTER TABLE", "RenameColumn": "ALTER TABLE", "AlterColumns": "ALTER TABLE",
    "RenameTable": "ALTER TABLE", "SetTableProperties": "ALTER TABLE", "UnsetTableProperties": "ALTER TABLE",
    "SetTableLocation": "ALTER TABLE",
}


def _name(obj) -> str:
    return obj.getClass().getSimpleName().rstrip("$")


def _seq(seq) -> list:
    return [seq.apply(i) for i in range(seq.size())]


class _Check:
    """One walk over a plan, collecting what it refuses (in the order met, each once)."""

    def __init__(self, spark, lake_names: set[str]):
        self.spark = spark
        self.lake = {n.lower() for n in lake_names}
        self.refused: dict[str, None] = {}
        self.missing: dict[str, None] = {}
        #: Names the statement's WITH clauses define; a reference to one reads that CTE, whose
        #: own plan is checked where it is defined.
        self.ctes: set[str] = set()
        jvm = spark._jvm
        self._plan_expression = jvm.java.lang.Class.forName("org.apache.spark.sql.catalyst.expressions.PlanExpression")
        self._user_defined = jvm.java.lang.Class.forName(
            "org.apache.spark.sql.catalyst.expressions.UserDefinedExpression")
        self._logical_plan = jvm.java.lang.Class.forName("org.apache.spark.sql.catalyst.plans.logical.LogicalPlan")
        self._builtin = jvm.org.apache.spark.sql.catalyst.analysis.FunctionRegistry.builtin()
        self._function_id = jvm.org.apache.spark.sql.catalyst.FunctionIdentifier

    def refuse(self, what: str) -> None:
        self.refused[what] = None

    # -- names -------------------------------------------------------------------------------
    def relation(self, parts: list[str], what: str = "relation") -> None:
        """A table or view of the lake: ``messages``, ``default.messages``, ``spark_catalog.default.messages``.

        Another name in that namespace is only missing (a typo); any other name (a file format and
        a path, another catalog or database) is refused.
        """
        lower = [p.lower() for p in parts]
        if len(lower) == 1 and lower[0] in self.ctes:
            return
        if lower[:-1] in ([], ["default"], ["spark_catalog", "default"]):
            if lower[-1] not in self.lake:
                self.missing[parts[-1]] = None
            return
        shown = ".".join(p if p.isidentifier() else f"`{p}`" for p in parts)
        self.refuse(f"{what} {shown} (not a table or view of the lake; files and paths cannot be read)")

    # -- parsed plans --------------------------------------------------------------------------
    def parsed(self, plan) -> None:
        name = _name(plan)
        if name == "ExplainCommand":
            return self.parsed(plan.logicalPlan())
        if name == "DescribeQueryCommand":
            return self.parsed(plan.plan())
        if name.startswith("UnresolvedPathBased"):  # Delta's DESCRIBE DETAIL / HISTORY '<path>'
            self.refuse(f"table delta.`{plan.path()}` (a path; name the lake's table instead)")
            return
        if name not in QUERY_NODES and name not in READ_COMMANDS:
            self.refuse(STATEMENTS.get(name, name) + ("" if name in STATEMENTS else " (not on the read-only allowlist)"))
            return  # what is under a refused node does not matter
        if name == "UnresolvedWith":
            self.ctes.update(pair._1().lower() for pair in _seq(plan.cteRelations()))
        if name == "UnresolvedRelation":
            self.relation(list(_seq(plan.multipartIdentifier())))
            if not plan.options().isEmpty():
                self.refuse("read options on a relation (WITH (...))")
        elif name in ("UnresolvedTableOrView", "UnresolvedTable", "UnresolvedView"):
            self.relation(list(_seq(plan.multipartIdentifier())), "table")
        elif name == "UnresolvedTableValuedFunction":
            parts = [p.lower() for p in _seq(plan.name())]
            if len(parts) != 1 or parts[0] not in ROW_FUNCTIONS:
                self.refuse(f"table function {'.'.join(parts)}() (only {', '.join(sorted(ROW_FUNCTIONS))})")
        for expression in _seq(plan.expressions()):
            self.expression(expression, self.parsed)
        for child in _seq(plan.children()) + _seq(plan.innerChildren()):
            if self._logical_plan.isInstance(child):
                self.parsed(child)

    def expression(self, expr, plans) -> None:
        name = _name(expr)
        if name == "UnresolvedFunction":
            parts = [p.lower() for p in _seq(expr.nameParts())]
            if parts[-1] in OUTSIDE_FUNCTIONS:
                self.refuse(f"function {parts[-1]}() (calls Java methods)")
            elif len(parts) != 1 or not self._builtin.functionExists(self._function_id(parts[0])):
                self.refuse(f"function {'.'.join(parts)}() (not a built-in function)")
        elif name == "CallMethodViaReflection":
            self.refuse("a reflective Java call (reflect, java_method, try_reflect)")
        elif self._user_defined.isInstance(expr):
            self.refuse(f"user-defined function {expr.prettyName()}")
        if self._plan_expression.isInstance(expr):
            plans(expr.plan())
        for child in _seq(expr.children()):
            self.expression(child, plans)

    # -- analysed plans ------------------------------------------------------------------------
    def analysed(self, plan) -> None:
        name = _name(plan)
        children = _seq(plan.children())
        if not children and name not in LITERAL_LEAVES:
            if name == "LogicalRelation" and plan.catalogTable().isDefined():
                ident = plan.catalogTable().get().identifier()
                parts = [ident.database().get()] if ident.database().isDefined() else []
                self.relation(parts + [ident.table()])
            elif name == "ResolvedTable":  # DESCRIBE, SHOW COLUMNS ... of a table
                ident = plan.identifier()
                self.relation(list(ident.namespace()) + [ident.name()])
            elif not (name == "CommandResult" or name.startswith(("Resolved", "Show", "Describe", "Explain"))):
                # SHOW / DESCRIBE results and the namespaces, views and functions they name,
                # which the parsed check allowed by name; anything else is no lake table.
                self.refuse(f"relation {plan.simpleString(80)} (not a table of the lake)")
        for expression in _seq(plan.expressions()):
            self.expression(expression, self.analysed)
        for child in children + _seq(plan.innerChildren()):
            if self._logical_plan.isInstance(child):
                self.analysed(child)

    def raise_if_refused(self) -> None:
        if self.refused:
            raise QueryRefused("refused in read-only mode: " + "; ".join(self.refused)
                               + ". msglake sql reads the lake's tables and views only "
                                 "(SELECT, WITH, VALUES, SHOW, DESCRIBE, EXPLAIN); --allow-writes is for maintenance")
        if self.missing:
            raise QueryError(f"SQL error: TABLE_OR_VIEW_NOT_FOUND: no table or view {', '.join(self.missing)} in the "
                             f"lake; it has {', '.join(sorted(self.lake)) or 'none yet (run msglake ingest first)'}")


def lake_relations(spark) -> set[str]:
    """The lake's tables (in the catalog) and views (temporary views of the session)."""
    return {t.name for t in spark.catalog.listTables()}


def check_parsed(spark, sql: str, lake_names: set[str] | None = None):
    """Parse ``sql`` (one statement) and refuse it unless it only reads the lake; returns the plan."""
    plan = spark._jsparkSession.sessionState().sqlParser().parsePlan(sql)
    check = _Check(spark, lake_relations(spark) if lake_names is None else lake_names)
    check.parsed(plan)
    check.raise_if_refused()
    return plan


def check_analysed(spark, df, lake_names: set[str] | None = None) -> None:
    """Refuse a query whose analysed plan reads anything but the lake's tables or calls outside SQL."""
    check = _Check(spark, lake_relations(spark) if lake_names is None else lake_names)
    check.analysed(df._jdf.queryExecution().analyzed())
    check.raise_if_refused()


#: Settings of a read-only session: no SQL over file paths, no SQL scripts.
READ_ONLY_CONF = {"spark.sql.runSQLOnFiles": "false", "spark.sql.scripting.enabled": "false"}


def read_only_session(spark):
    """A session sharing ``spark``'s SparkContext and catalog, with :data:`READ_ONLY_CONF` set and
    the lake's views registered; the session ``spark`` itself is left as it is."""
    from msglake.pipelines.io.views import register_views

    session = spark.newSession()
    for key, value in READ_ONLY_CONF.items():
        session.conf.set(key, value)
    register_views(session, {t.name for t in spark.catalog.listTables() if not t.isTemporary})
    return session
