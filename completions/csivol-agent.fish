# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_csivol_agent_global_optspecs
    string join \n h/help V/version
end

function __fish_csivol_agent_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_csivol_agent_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_csivol_agent_using_subcommand
    set -l cmd (__fish_csivol_agent_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c csivol-agent -n "__fish_csivol_agent_needs_command" -s h -l help -d 'Print help'
complete -c csivol-agent -n "__fish_csivol_agent_needs_command" -s V -l version -d 'Print version'
complete -c csivol-agent -n "__fish_csivol_agent_needs_command" -f -a "run" -d 'Run the node agent: drive this node\'s CSI plugins toward the server\'s desired state'
complete -c csivol-agent -n "__fish_csivol_agent_needs_command" -f -a "check" -d 'Check a CSI plugin before trusting it: one safe round trip on a scratch volume the check creates and deletes (CreateVolume where offered, ControllerPublishVolume, NodeStageVolume, NodePublishVolume, a write and a read through the target, and back; each call twice), run on the node as root. It prints the plugin\'s capabilities and node info, the shape it stages and publishes in, which readiness check applies and whether it passes, the time per call and every departure from the spec it met, and exits 1 when one would hurt csivol'
complete -c csivol-agent -n "__fish_csivol_agent_needs_command" -f -a "node" -d 'The old spelling of `run`, accepted with a notice until the next release'
complete -c csivol-agent -n "__fish_csivol_agent_needs_command" -f -a "server" -d 'Moved: the server is `csivol-server serve` (and its maintenance commands)'
complete -c csivol-agent -n "__fish_csivol_agent_needs_command" -f -a "dev" -d 'Moved: dev mode is `csivol-server dev`'
complete -c csivol-agent -n "__fish_csivol_agent_needs_command" -f -a "tls" -d 'Moved: `csivol-server tls init`'
complete -c csivol-agent -n "__fish_csivol_agent_needs_command" -f -a "hostpath" -d 'Moved: the reference plugin is the `csivol-hostpath` program'
complete -c csivol-agent -n "__fish_csivol_agent_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand run" -l server -d 'The server\'s URL, e.g. `https://10.0.0.1:7420`: plain `http://` only to a loopback address (127.0.0.0/8, ::1, localhost), no `USER@`; a bare `HOST:PORT` is https with --ca-cert, else plain HTTP on loopback only. Several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached (the self-fence clock runs only while none answers)' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand run" -l ca-cert -d 'The CA (PEM) that signed the server\'s certificate [default: the system\'s roots]' -r -F
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand run" -l tls-cert -d 'This node\'s client certificate (PEM) for mutual TLS; it must name this node' -r -F
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand run" -l tls-key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand run" -l node -d 'This node\'s name, as claims name it' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand run" -l data-dir -d 'Where the agent keeps `agent.db`, the staging paths and the target paths' -r -F
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand run" -l token-file -d 'File holding this node\'s token (`csivol token create --role node --node NAME`)' -r -F
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand run" -l plugin -d 'A node plugin: csivol\'s id for it and its endpoint, `unix:///path.sock` or `tcp://host:port`. Repeatable' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand run" -l controller -d 'Host this plugin\'s controller: run its ControllerPublish/Unpublish and Create/DeleteVolume calls for the server. Repeatable' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand run" -l fence-after -d 'Self-fence: after this long without reaching the server, unpublish and unstage every volume on this node (e.g. `5m`). Off by default' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand run" -l ready-check -d 'How a published volume is checked ready: `mount` (the target is mounted from the volume, per `/proc/self/mountinfo`) or `exists` (the target exists; for plugins that do not mount, such as `csivol-hostpath --mount none`). `ID=CHECK` sets it for one plugin. Repeatable' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand run" -l label -d 'A label reported at registration, e.g. `rack=4`, shown as the agent\'s own by `csivol node show`. The server never fences a node by what it says of itself: only a key a fence method lists in `trust_agent_labels` may select that method. Repeatable' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand run" -l node-limits-refresh -d 'How often the node plugins\' attach limits are read again with NodeGetInfo (at once, too, after a NodeStageVolume or ControllerPublishVolume answered RESOURCE_EXHAUSTED) [default: 5m]' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand run" -l config -d 'TOML file with these settings and tuning (`node_concurrency`, `node_call_timeout`, `controller_call_timeout`, `volume_ready_timeout`, `resync_interval`, ...)' -r -F
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand run" -l take-down-on-stop -d 'When asked to stop (SIGTERM, SIGINT), unpublish and unstage every volume through its plugin first, recording each step, instead of leaving the mounts in place. Dev mode uses it; on a real node workloads outlive the agent, so it is off by default'
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand run" -s h -l help -d 'Print help'
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand check" -l plugin -d 'The plugin to check, as `run --plugin` names it: `ID=unix:///path.sock` (or `tcp://host:port`). Its controller is reached on the same endpoint when it advertises one' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand check" -l data-dir -d 'The agent\'s data dir (`run --data-dir`): the scratch volume\'s staging path and target go in a directory of their own below it, where the plugin sees the agent\'s paths, and it is removed afterwards' -r -F
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand check" -l capacity -d 'The scratch volume\'s size in bytes' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand check" -l parameter -d 'A CreateVolume parameter, `KEY=VALUE` (repeatable), as a volume spec\'s `parameters` would give it' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand check" -l volume-id -d 'For a plugin that cannot create volumes (no CREATE_DELETE_VOLUME): the plugin\'s id of an existing scratch volume, published and taken down, never deleted. Its data is overwritten' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand check" -l ready-check -d 'The readiness check the agent will apply to the plugin (`run --ready-check`)' -r -f -a "mount\t'The target path is a mount point (per `/proc/self/mountinfo`); for block volumes, the target exists'
exists\t'The target path exists: for plugins that present volumes without mounting them, such as `csivol-hostpath --mount none`'"
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand check" -l timeout -d 'How long the plugin may take to answer Probe, and each call' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand check" -s o -l output -d '`text`, or `json` (one object on stdout)' -r -f -a "text\t''
json\t''"
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand check" -l mount-group -d 'Where the plugin has VOLUME_MOUNT_GROUP: the group (a gid) the scratch volume is mounted with, and the uid and gid of the process that makes a file through it' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand check" -l block -d 'Check a raw block volume instead of a mounted file system'
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand node" -l server -d 'The server\'s URL, e.g. `https://10.0.0.1:7420`: plain `http://` only to a loopback address (127.0.0.0/8, ::1, localhost), no `USER@`; a bare `HOST:PORT` is https with --ca-cert, else plain HTTP on loopback only. Several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached (the self-fence clock runs only while none answers)' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand node" -l ca-cert -d 'The CA (PEM) that signed the server\'s certificate [default: the system\'s roots]' -r -F
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand node" -l tls-cert -d 'This node\'s client certificate (PEM) for mutual TLS; it must name this node' -r -F
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand node" -l tls-key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand node" -l node -d 'This node\'s name, as claims name it' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand node" -l data-dir -d 'Where the agent keeps `agent.db`, the staging paths and the target paths' -r -F
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand node" -l token-file -d 'File holding this node\'s token (`csivol token create --role node --node NAME`)' -r -F
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand node" -l plugin -d 'A node plugin: csivol\'s id for it and its endpoint, `unix:///path.sock` or `tcp://host:port`. Repeatable' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand node" -l controller -d 'Host this plugin\'s controller: run its ControllerPublish/Unpublish and Create/DeleteVolume calls for the server. Repeatable' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand node" -l fence-after -d 'Self-fence: after this long without reaching the server, unpublish and unstage every volume on this node (e.g. `5m`). Off by default' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand node" -l ready-check -d 'How a published volume is checked ready: `mount` (the target is mounted from the volume, per `/proc/self/mountinfo`) or `exists` (the target exists; for plugins that do not mount, such as `csivol-hostpath --mount none`). `ID=CHECK` sets it for one plugin. Repeatable' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand node" -l label -d 'A label reported at registration, e.g. `rack=4`, shown as the agent\'s own by `csivol node show`. The server never fences a node by what it says of itself: only a key a fence method lists in `trust_agent_labels` may select that method. Repeatable' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand node" -l node-limits-refresh -d 'How often the node plugins\' attach limits are read again with NodeGetInfo (at once, too, after a NodeStageVolume or ControllerPublishVolume answered RESOURCE_EXHAUSTED) [default: 5m]' -r
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand node" -l config -d 'TOML file with these settings and tuning (`node_concurrency`, `node_call_timeout`, `controller_call_timeout`, `volume_ready_timeout`, `resync_interval`, ...)' -r -F
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand node" -l take-down-on-stop -d 'When asked to stop (SIGTERM, SIGINT), unpublish and unstage every volume through its plugin first, recording each step, instead of leaving the mounts in place. Dev mode uses it; on a real node workloads outlive the agent, so it is off by default'
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand node" -s h -l help -d 'Print help'
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand help; and not __fish_seen_subcommand_from run check node server dev tls hostpath help" -f -a "run" -d 'Run the node agent: drive this node\'s CSI plugins toward the server\'s desired state'
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand help; and not __fish_seen_subcommand_from run check node server dev tls hostpath help" -f -a "check" -d 'Check a CSI plugin before trusting it: one safe round trip on a scratch volume the check creates and deletes (CreateVolume where offered, ControllerPublishVolume, NodeStageVolume, NodePublishVolume, a write and a read through the target, and back; each call twice), run on the node as root. It prints the plugin\'s capabilities and node info, the shape it stages and publishes in, which readiness check applies and whether it passes, the time per call and every departure from the spec it met, and exits 1 when one would hurt csivol'
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand help; and not __fish_seen_subcommand_from run check node server dev tls hostpath help" -f -a "node" -d 'The old spelling of `run`, accepted with a notice until the next release'
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand help; and not __fish_seen_subcommand_from run check node server dev tls hostpath help" -f -a "server" -d 'Moved: the server is `csivol-server serve` (and its maintenance commands)'
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand help; and not __fish_seen_subcommand_from run check node server dev tls hostpath help" -f -a "dev" -d 'Moved: dev mode is `csivol-server dev`'
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand help; and not __fish_seen_subcommand_from run check node server dev tls hostpath help" -f -a "tls" -d 'Moved: `csivol-server tls init`'
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand help; and not __fish_seen_subcommand_from run check node server dev tls hostpath help" -f -a "hostpath" -d 'Moved: the reference plugin is the `csivol-hostpath` program'
complete -c csivol-agent -n "__fish_csivol_agent_using_subcommand help; and not __fish_seen_subcommand_from run check node server dev tls hostpath help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
