-- Whether a plugin needs ControllerPublish is asked for every claim; answer it from an
-- index instead of every node's row.
CREATE INDEX node_plugins_caps ON node_plugins (plugin, controller, controller_publish);
CREATE INDEX node_plugins_service ON node_plugins (plugin, controller_service);
CREATE INDEX events_alloc ON events (alloc);
