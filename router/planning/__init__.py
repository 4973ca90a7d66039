"""`icerouter plan` (what a schema would change in the tables) and `icerouter check` (the CI gate).

Read-only: both combine routes, the registry and evolution/ without writing anything.
"""

from router.planning.plan_and_check import (
    CheckResult, TableCheck, check_command, check_schema, detect_schema_type, exit_code, map_schema, plan_command,
    plan_for_schema, render_check_json, render_check_junit, render_check_text, render_plan_json, render_plan_text,
    subject_topic,
)

__all__ = ["map_schema", "plan_for_schema", "render_plan_text", "render_plan_json", "CheckResult",
           "TableCheck", "check_schema", "render_check_text", "render_check_json", "render_check_junit",
           "exit_code", "plan_command", "check_command", "subject_topic", "detect_schema_type"]
