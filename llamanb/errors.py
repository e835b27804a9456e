"""The one exception type the CLI turns into a one-line message and exit code 2."""


class LlamanbError(Exception):
    """A problem with the user's input (model file, prompt, option), not a bug.

    The message is a single line that says what is wrong and, where it helps, what to do.
    """
