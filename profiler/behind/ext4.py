"""(placeholder until this module's probe lands: loads nothing, reports nothing)"""

NAME = "ext4"
OBJECT = None


class Probe:
    def __init__(self, obj):
        self.obj = obj

    def set_targets(self, targets):
        pass

    def reset(self):
        pass

    def snapshot(self):
        return {}


def summarize(raw, ctx):
    return {}


def report_lines(section, fs):
    return []
