"""Helpers shared by the tests (and the screenshot script): paths, AppTest, the app server, the browser."""
