"""Journeys start real processes: the e2e fixtures serve them."""

from tests.e2e.conftest import *  # noqa: F403 - the roles, their environment and their clean-up
