"""Journeys start real processes: the e2e fixtures serve them."""

from tests.e2e.conftest import *  # noqa: F403 - the roles, their environment and their clean-up
from tests.e2e.conftest import _empty_database  # noqa: F401 - every journey starts on empty tables, as e2e tests do
