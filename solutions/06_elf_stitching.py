"""Solutions to the exercises of notebook 06 (stitching)."""


def group_arguments(members):
    """The group's arguments in order of first use, and each member's %argN -> %argM map.
    Why: two members that name the same group argument must share one buffer, so a name keeps the
    index it got the first time; unmapped arguments stay private to their member (<label>_<name>)."""
    names, slots = [], []
    for label, kernel_args, argmap in members:
        slot = []
        for a in kernel_args:
            g = argmap.get(a, f"{label}_{a}")
            if g not in names:
                names.append(g)
            slot.append(names.index(g))
        slots.append(slot)
    return names, slots


def derive_roles(events, names):
    """Roles of the group's arguments from the members' roles, in launch order.
    Why: a buffer one launch writes and a later one reads never needs to leave the device
    (an intermediate); what is written last is the group's output; the rest is read only."""
    roles = {}
    for g in names:
        written = read_after_write = weight = False
        for event in events:
            for name, role in event:
                if name != g:
                    continue
                if role in ("output", "intermediate"):
                    written = True
                elif written:
                    read_after_write = True
                weight = weight or role == "weight"
        if written:
            roles[g] = "intermediate" if read_after_write else "output"
        else:
            roles[g] = "weight" if weight else "input"
    return roles
