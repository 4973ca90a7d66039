"""Routing: which tables a record goes to (rules compiled once, evaluated column-wise)."""

from router.routing.routes import CompiledRoute, RoutingTable, compile_route, normalise_identifier_part

__all__ = ["CompiledRoute", "RoutingTable", "compile_route", "normalise_identifier_part"]
