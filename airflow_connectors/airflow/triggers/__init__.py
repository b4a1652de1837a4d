"""Triggers that poll a connector's source: the asset watcher's event trigger and
the deferrable sensor's trigger."""
