"""Notifications: tell people by email or webhook when their jobs finish, fail, are requeued or wait long."""
