# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_csivol_global_optspecs
    string join \n addr= ca-cert= token= o/output= no-color q/quiet stale h/help V/version
end

function __fish_csivol_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_csivol_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_csivol_using_subcommand
    set -l cmd (__fish_csivol_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c csivol -n "__fish_csivol_needs_command" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_needs_command" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_needs_command" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_needs_command" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_needs_command" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_needs_command" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_needs_command" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_needs_command" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_needs_command" -f -a "volume" -d 'Register, create, list, show and deregister volumes'
complete -c csivol -n "__fish_csivol_needs_command" -f -a "snapshot" -d 'Snapshot volumes; list, show and delete snapshots'
complete -c csivol -n "__fish_csivol_needs_command" -f -a "claim" -d 'Claim a volume for an alloc on a node; renew a claim\'s lease; list claims'
complete -c csivol -n "__fish_csivol_needs_command" -f -a "run" -d 'Claim volumes, run a command with them mounted, release them: a CI job in one line'
complete -c csivol -n "__fish_csivol_needs_command" -f -a "release" -d 'Release an alloc\'s claim on a volume'
complete -c csivol -n "__fish_csivol_needs_command" -f -a "status" -d 'Show the cluster at a glance, one volume in detail, or the blocked volumes'
complete -c csivol -n "__fish_csivol_needs_command" -f -a "unblock" -d 'Free volumes held by a lost node: force-release its claims and force-detach'
complete -c csivol -n "__fish_csivol_needs_command" -f -a "fence" -d 'Power a lost node off through its fence method, then unblock its volumes with the proof'
complete -c csivol -n "__fish_csivol_needs_command" -f -a "detach" -d 'Take a volume off a node: release every claim it has there'
complete -c csivol -n "__fish_csivol_needs_command" -f -a "node" -d 'List nodes, or show one'
complete -c csivol -n "__fish_csivol_needs_command" -f -a "plugin" -d 'List plugins, or show one'
complete -c csivol -n "__fish_csivol_needs_command" -f -a "events" -d 'Show the audit trail, or follow it'
complete -c csivol -n "__fish_csivol_needs_command" -f -a "token" -d 'Create, list and revoke API tokens'
complete -c csivol -n "__fish_csivol_needs_command" -f -a "completions" -d 'Print a shell completion script'
complete -c csivol -n "__fish_csivol_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -f -a "register" -d 'Register an existing volume from a TOML or JSON spec'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -f -a "adopt" -d 'Register a volume the plugin\'s storage holds and csivol does not know'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -f -a "import" -d 'Read another orchestrator\'s volumes and write them as csivol register specs'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -f -a "create" -d 'Create a volume through its plugin\'s controller (CreateVolume), then register it'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -f -a "list" -d 'List volumes'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -f -a "show" -d 'Show a volume with its claims and attachments'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -f -a "deregister" -d 'Forget a volume (its storage is kept), or with --delete destroy it'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -f -a "expand" -d 'Grow a volume through its plugin (ControllerExpandVolume, then NodeExpandVolume)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -f -a "modify" -d 'Change a volume\'s mutable parameters through its plugin (ControllerModifyVolume)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and not __fish_seen_subcommand_from register adopt import create list show deregister expand modify help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from register" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from register" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from register" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from register" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from register" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from register" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from register" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from register" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from register" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from adopt" -l name -d 'The volume\'s name in csivol' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from adopt" -l access-mode -d 'How it may be used: single-node-writer, single-node-reader-only, single-node-single-writer, single-node-multi-writer, multi-node-reader-only, multi-node-single-writer or multi-node-multi-writer' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from adopt" -l attachment -d 'file-system or block-device' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from adopt" -l fs-type -d 'The file system it is mounted with (file-system only; empty: the plugin\'s default)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from adopt" -l published-to -d 'A node the listing has the volume published to, which the operator takes responsibility for (a csivol node name or the plugin\'s node id; repeatable)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from adopt" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from adopt" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from adopt" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from adopt" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from adopt" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from adopt" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from adopt" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from adopt" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from adopt" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from import" -l out -d 'Write each spec to DIR/NAME.toml instead of printing it' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from import" -l access-mode -d 'The access mode of the volumes the output gives none (Nomad records a volume\'s mode only while it is claimed); without it they are skipped' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from import" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from import" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from import" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from import" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from import" -l apply -d 'Register the volumes'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from import" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from import" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from import" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from import" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from import" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from create" -l from-snapshot -d 'Start with the data of this snapshot (CreateVolume\'s volume_content_source)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from create" -l from-volume -d 'Start with a copy of this volume\'s data: a clone (CreateVolume\'s volume_content_source)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from create" -l timeout -d 'How long --wait waits before giving up with exit code 5' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from create" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from create" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from create" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from create" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from create" -l wait -d 'Wait until it is done, showing progress on a terminal'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from create" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from create" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from create" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from create" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from create" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from list" -l plugin -d 'Only volumes of this plugin' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from list" -l state -d 'Only volumes in this state' -r -f -a "creating\t''
free\t''
attached\t''
blocked\t''
deleting\t''
failed\t''"
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from list" -l node -d 'Only volumes claimed or attached on this node' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from list" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from list" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from list" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from list" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from list" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from list" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from show" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from show" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from show" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from show" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from show" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from show" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from show" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from deregister" -l timeout -d 'How long --wait waits before giving up with exit code 5' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from deregister" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from deregister" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from deregister" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from deregister" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from deregister" -l delete -d 'Also destroy the volume and its data through the plugin (DeleteVolume)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from deregister" -s y -l yes -d 'Do it without asking'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from deregister" -l wait -d 'Wait until it is done, showing progress on a terminal'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from deregister" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from deregister" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from deregister" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from deregister" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from deregister" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from expand" -l capacity -d 'The capacity to reach: bytes, or a size with a unit (`20GiB`, `500M`, `1.5T`; K/M/G/T are powers of 1000, KiB/MiB/GiB/TiB powers of 1024)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from expand" -l timeout -d 'How long --wait waits before giving up with exit code 5' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from expand" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from expand" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from expand" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from expand" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from expand" -l cancel -d 'Cancel the expansion that failed or keeps failing; the volume keeps what it has'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from expand" -l wait -d 'Wait until it is done, showing progress on a terminal'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from expand" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from expand" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from expand" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from expand" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from expand" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from modify" -l param -l parameter -d 'A mutable parameter to set, KEY=VALUE (repeatable)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from modify" -l timeout -d 'How long --wait waits before giving up with exit code 5' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from modify" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from modify" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from modify" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from modify" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from modify" -l wait -d 'Wait until it is done, showing progress on a terminal'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from modify" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from modify" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from modify" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from modify" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from modify" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from help" -f -a "register" -d 'Register an existing volume from a TOML or JSON spec'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from help" -f -a "adopt" -d 'Register a volume the plugin\'s storage holds and csivol does not know'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from help" -f -a "import" -d 'Read another orchestrator\'s volumes and write them as csivol register specs'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from help" -f -a "create" -d 'Create a volume through its plugin\'s controller (CreateVolume), then register it'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from help" -f -a "list" -d 'List volumes'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from help" -f -a "show" -d 'Show a volume with its claims and attachments'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from help" -f -a "deregister" -d 'Forget a volume (its storage is kept), or with --delete destroy it'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from help" -f -a "expand" -d 'Grow a volume through its plugin (ControllerExpandVolume, then NodeExpandVolume)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from help" -f -a "modify" -d 'Change a volume\'s mutable parameters through its plugin (ControllerModifyVolume)'
complete -c csivol -n "__fish_csivol_using_subcommand volume; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and not __fish_seen_subcommand_from create list show delete help" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and not __fish_seen_subcommand_from create list show delete help" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and not __fish_seen_subcommand_from create list show delete help" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and not __fish_seen_subcommand_from create list show delete help" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and not __fish_seen_subcommand_from create list show delete help" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and not __fish_seen_subcommand_from create list show delete help" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and not __fish_seen_subcommand_from create list show delete help" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and not __fish_seen_subcommand_from create list show delete help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and not __fish_seen_subcommand_from create list show delete help" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and not __fish_seen_subcommand_from create list show delete help" -f -a "create" -d 'Snapshot a volume (CreateSnapshot), or several together (--group)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and not __fish_seen_subcommand_from create list show delete help" -f -a "list" -d 'List snapshots (group members among them), or the group snapshots (--groups)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and not __fish_seen_subcommand_from create list show delete help" -f -a "show" -d 'Show a snapshot, or a group snapshot with its members'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and not __fish_seen_subcommand_from create list show delete help" -f -a "delete" -d 'Delete a snapshot (DeleteSnapshot), or a group snapshot with its members (DeleteVolumeGroupSnapshot)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and not __fish_seen_subcommand_from create list show delete help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from create" -l name -d 'The snapshot\'s name (one volume)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from create" -l group -d 'The group snapshot\'s name: snapshot every VOLUME together' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from create" -l parameter -d 'A CreateSnapshot (or CreateVolumeGroupSnapshot) parameter for the plugin, KEY=VALUE (repeatable)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from create" -l timeout -d 'How long --wait waits before giving up with exit code 5' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from create" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from create" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from create" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from create" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from create" -l wait -d 'Wait until it is done, showing progress on a terminal'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from create" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from create" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from create" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from create" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from create" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from list" -l volume -d 'Only snapshots of this volume' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from list" -l group -d 'Only the members of this group snapshot' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from list" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from list" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from list" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from list" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from list" -l groups -d 'List the group snapshots instead, one line each'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from list" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from list" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from show" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from show" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from show" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from show" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from show" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from show" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from show" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from delete" -l timeout -d 'How long --wait waits before giving up with exit code 5' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from delete" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from delete" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from delete" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from delete" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from delete" -s y -l yes -d 'Do it without asking'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from delete" -l wait -d 'Wait until it is done, showing progress on a terminal'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from delete" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from delete" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from delete" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from delete" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from delete" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from help" -f -a "create" -d 'Snapshot a volume (CreateSnapshot), or several together (--group)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from help" -f -a "list" -d 'List snapshots (group members among them), or the group snapshots (--groups)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from help" -f -a "show" -d 'Show a snapshot, or a group snapshot with its members'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from help" -f -a "delete" -d 'Delete a snapshot (DeleteSnapshot), or a group snapshot with its members (DeleteVolumeGroupSnapshot)'
complete -c csivol -n "__fish_csivol_using_subcommand snapshot; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l node -d 'The node the alloc runs on' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l alloc -d 'The alloc (workload) claiming the volume; claiming again with the same alloc is a no-op' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l ttl -d 'A lease: the server releases the claim unless it is renewed within this long (`csivol claim renew`)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l label -d 'A label for the claim, shown with it and in the event log (e.g. the CI job\'s URL). Repeatable' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l gid -d 'The group (a gid) the workload writes the volume as: the node plugin applies it where it has VOLUME_MOUNT_GROUP, else csivol gives the volume\'s root that group, g+rwX and setgid where the `ownership` of the volume or of its plugin (the server\'s config) allows it; refused otherwise. `run` asks by default for the caller\'s primary group when the caller is not root, and where that cannot be applied runs without it and says why' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l group -d 'Like --gid, the group named on this machine (/etc/group)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l mount-flag -d 'A mount flag for the claim\'s own mount (e.g. `noatime`), among the volume spec\'s `claim_mount_flags`; sent with NodePublishVolume only. `ro`/`rw` are the claim\'s mode (`claim --read-only`, `run VOLUME:ro`), not flags. Repeatable' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l selinux-context -d 'The SELinux context to mount the volume with (e.g. `system_u:object_r:container_file_t:s0:c1,c2`), passed as a `context="..."` mount flag; only for a plugin the server\'s config declares able to (`selinux_mount`)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l timeout -d 'How long --wait waits before giving up with exit code 5' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l read-only -d 'Claim it for reading only'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l queue -d 'Wait in the volume\'s queue when other claims are in the way, instead of a refusal; queued claims are granted in arrival order'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l dry-run -d 'Only say whether the claim would be accepted, and why not; records nothing'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l release-on-timeout -d 'When --wait runs out of --timeout, release the claim instead of leaving it'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l wait -d 'Wait until it is done, showing progress on a terminal'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -a "renew" -d 'Extend a claim\'s lease from now'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -a "list" -d 'List claims across volumes, oldest first'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -a "show" -d 'Show one claim: its state, its mount (group and who applies it, what csivol\'s ownership change did, its own flags and SELinux context), lease and labels'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and not __fish_seen_subcommand_from renew list show help" -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from renew" -l alloc -d 'The alloc whose claim to renew' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from renew" -l ttl -d 'The new lease, from now [default: the claim\'s own TTL]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from renew" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from renew" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from renew" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from renew" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from renew" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from renew" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from renew" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from renew" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from renew" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from list" -l volume -d 'Only claims of this volume' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from list" -l node -d 'Only claims on this node' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from list" -l state -d 'Only claims in this state' -r -f -a "queued\t''
pending\t''
attaching\t''
publishing\t''
ready\t''
releasing\t''
failed\t''
blocked\t''"
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from list" -l older-than -d 'Only claims made longer ago than this (e.g. 1h)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from list" -l label -d 'Only claims with this label. Repeatable: all must match' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from list" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from list" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from list" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from list" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from list" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from list" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from show" -l alloc -d 'The alloc whose claim to show' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from show" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from show" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from show" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from show" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from show" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from show" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from show" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from help" -f -a "renew" -d 'Extend a claim\'s lease from now'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from help" -f -a "list" -d 'List claims across volumes, oldest first'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from help" -f -a "show" -d 'Show one claim: its state, its mount (group and who applies it, what csivol\'s ownership change did, its own flags and SELinux context), lease and labels'
complete -c csivol -n "__fish_csivol_using_subcommand claim; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol -n "__fish_csivol_using_subcommand run" -l node -d 'The node the command runs on (this machine\'s node)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand run" -l alloc -d 'The alloc the claims are made for [default: from the CI job (GITHUB_RUN_ID, CI_JOB_ID, BUILD_TAG, BUILDKITE_JOB_ID), else random; printed]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand run" -l ttl -d 'The claims\' lease, renewed every third of it while the command runs' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand run" -l timeout -d 'How long to wait for every volume to be ready (with --queue: including the wait in line)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand run" -l label -d 'A label for every claim (e.g. the CI job\'s URL). Repeatable' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand run" -l gid -d 'The group (a gid) the workload writes the volume as: the node plugin applies it where it has VOLUME_MOUNT_GROUP, else csivol gives the volume\'s root that group, g+rwX and setgid where the `ownership` of the volume or of its plugin (the server\'s config) allows it; refused otherwise. `run` asks by default for the caller\'s primary group when the caller is not root, and where that cannot be applied runs without it and says why' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand run" -l group -d 'Like --gid, the group named on this machine (/etc/group)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand run" -l mount-flag -d 'A mount flag for the claim\'s own mount (e.g. `noatime`), among the volume spec\'s `claim_mount_flags`; sent with NodePublishVolume only. `ro`/`rw` are the claim\'s mode (`claim --read-only`, `run VOLUME:ro`), not flags. Repeatable' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand run" -l selinux-context -d 'The SELinux context to mount the volume with (e.g. `system_u:object_r:container_file_t:s0:c1,c2`), passed as a `context="..."` mount flag; only for a plugin the server\'s config declares able to (`selinux_mount`)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand run" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand run" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand run" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand run" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand run" -l queue -d 'Wait in line for volumes held by others instead of failing'
complete -c csivol -n "__fish_csivol_using_subcommand run" -l no-wait-release -d 'Do not wait for the release to finish after the command'
complete -c csivol -n "__fish_csivol_using_subcommand run" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand run" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand run" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand run" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand release" -l alloc -d 'The alloc whose claim to release' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand release" -l timeout -d 'How long --wait waits before giving up with exit code 5' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand release" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand release" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand release" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand release" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand release" -l ignore-missing -d 'Exit 0 when the claim is already gone or being released (a missing volume is still exit 3): for scripts that may release twice'
complete -c csivol -n "__fish_csivol_using_subcommand release" -l wait -d 'Wait until it is done, showing progress on a terminal'
complete -c csivol -n "__fish_csivol_using_subcommand release" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand release" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand release" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand release" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand status" -l node -d 'Only volumes claimed or attached on this node, and only this node' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand status" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand status" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand status" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand status" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand status" -l blocked -d 'Only blocked volumes, with the lost node and the unblock command; exit code 6 when any is blocked, 0 when none is'
complete -c csivol -n "__fish_csivol_using_subcommand status" -s w -l watch -d 'Keep it on screen and redraw it when something changes (blocking queries on the event log, and every few seconds for heartbeat countdowns) until interrupted'
complete -c csivol -n "__fish_csivol_using_subcommand status" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand status" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand status" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand status" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand unblock" -l node -d 'The lost node: every volume it holds blocked' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand unblock" -l reason -d 'Why, for the event log (e.g. "n2 powered off in rack 4"); not needed with --dry-run' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand unblock" -l timeout -d 'How long --wait waits before giving up with exit code 5' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand unblock" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand unblock" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand unblock" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand unblock" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand unblock" -s y -l yes -d 'Do it without asking'
complete -c csivol -n "__fish_csivol_using_subcommand unblock" -l dry-run -d 'Only show what would happen'
complete -c csivol -n "__fish_csivol_using_subcommand unblock" -l wait -d 'Wait until it is done, showing progress on a terminal'
complete -c csivol -n "__fish_csivol_using_subcommand unblock" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand unblock" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand unblock" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand unblock" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand unblock" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand fence" -l reason -d 'Why, for the event log (e.g. "node-2 unreachable since 03:10, BMC answers")' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand fence" -l timeout -d 'How long --wait waits before giving up with exit code 5' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand fence" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand fence" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand fence" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand fence" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand fence" -l force -d 'The node is ready, not lost: power it off anyway (asks twice on a terminal)'
complete -c csivol -n "__fish_csivol_using_subcommand fence" -s y -l yes -d 'Do it without asking'
complete -c csivol -n "__fish_csivol_using_subcommand fence" -l dry-run -d 'Only show what would happen'
complete -c csivol -n "__fish_csivol_using_subcommand fence" -l wait -d 'Wait until it is done, showing progress on a terminal'
complete -c csivol -n "__fish_csivol_using_subcommand fence" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand fence" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand fence" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand fence" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand fence" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand detach" -l node -d 'The node to detach it from' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand detach" -l reason -d 'Why, for the event log; not needed with --dry-run' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand detach" -l timeout -d 'How long --wait waits before giving up with exit code 5' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand detach" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand detach" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand detach" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand detach" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand detach" -l force -d 'The node is lost: release its claims and detach without it'
complete -c csivol -n "__fish_csivol_using_subcommand detach" -s y -l yes -d 'Do it without asking'
complete -c csivol -n "__fish_csivol_using_subcommand detach" -l dry-run -d 'Only show what would happen'
complete -c csivol -n "__fish_csivol_using_subcommand detach" -l wait -d 'Wait until it is done, showing progress on a terminal'
complete -c csivol -n "__fish_csivol_using_subcommand detach" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand detach" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand detach" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand detach" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand detach" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand node; and not __fish_seen_subcommand_from list show drain eligibility label remove help" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand node; and not __fish_seen_subcommand_from list show drain eligibility label remove help" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand node; and not __fish_seen_subcommand_from list show drain eligibility label remove help" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand node; and not __fish_seen_subcommand_from list show drain eligibility label remove help" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand node; and not __fish_seen_subcommand_from list show drain eligibility label remove help" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and not __fish_seen_subcommand_from list show drain eligibility label remove help" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand node; and not __fish_seen_subcommand_from list show drain eligibility label remove help" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and not __fish_seen_subcommand_from list show drain eligibility label remove help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand node; and not __fish_seen_subcommand_from list show drain eligibility label remove help" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand node; and not __fish_seen_subcommand_from list show drain eligibility label remove help" -f -a "list" -d 'List nodes with their status, heartbeat and plugins'
complete -c csivol -n "__fish_csivol_using_subcommand node; and not __fish_seen_subcommand_from list show drain eligibility label remove help" -f -a "show" -d 'Show a node: status, heartbeat against the TTL, eligibility, plugins, claims, attachments, blocked volumes and recent events'
complete -c csivol -n "__fish_csivol_using_subcommand node; and not __fish_seen_subcommand_from list show drain eligibility label remove help" -f -a "drain" -d 'Take a node out of service: no new claims on it, then (with --wait) wait until its claims are released by their owners'
complete -c csivol -n "__fish_csivol_using_subcommand node; and not __fish_seen_subcommand_from list show drain eligibility label remove help" -f -a "eligibility" -d 'Whether a node takes new claims (existing claims are not touched)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and not __fish_seen_subcommand_from list show drain eligibility label remove help" -f -a "label" -d 'Set or remove the labels an operator keeps on a node: the only labels fence methods select by and fill their commands from (`{bmc}`)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and not __fish_seen_subcommand_from list show drain eligibility label remove help" -f -a "remove" -d 'Forget a node that holds nothing: no claim, no attachment, nothing blocked'
complete -c csivol -n "__fish_csivol_using_subcommand node; and not __fish_seen_subcommand_from list show drain eligibility label remove help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from list" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from list" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from list" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from list" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from list" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from list" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from show" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from show" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from show" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from show" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from show" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from show" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from show" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from drain" -l deadline -d 'How long --wait waits before giving up with exit code 5 (the node stays draining)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from drain" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from drain" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from drain" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from drain" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from drain" -l wait -d 'Wait until no claim is left on the node'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from drain" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from drain" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from drain" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from drain" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from drain" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from eligibility" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from eligibility" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from eligibility" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from eligibility" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from eligibility" -l enable -d 'New claims may be made on the node again (also ends a drain)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from eligibility" -l disable -d 'No new claims on the node'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from eligibility" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from eligibility" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from eligibility" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from eligibility" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from eligibility" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from label" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from label" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from label" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from label" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from label" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from label" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from label" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from label" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from label" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from remove" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from remove" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from remove" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from remove" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from remove" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from remove" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from remove" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from remove" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from remove" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from help" -f -a "list" -d 'List nodes with their status, heartbeat and plugins'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from help" -f -a "show" -d 'Show a node: status, heartbeat against the TTL, eligibility, plugins, claims, attachments, blocked volumes and recent events'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from help" -f -a "drain" -d 'Take a node out of service: no new claims on it, then (with --wait) wait until its claims are released by their owners'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from help" -f -a "eligibility" -d 'Whether a node takes new claims (existing claims are not touched)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from help" -f -a "label" -d 'Set or remove the labels an operator keeps on a node: the only labels fence methods select by and fill their commands from (`{bmc}`)'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from help" -f -a "remove" -d 'Forget a node that holds nothing: no claim, no attachment, nothing blocked'
complete -c csivol -n "__fish_csivol_using_subcommand node; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and not __fish_seen_subcommand_from list show volumes controllers help" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and not __fish_seen_subcommand_from list show volumes controllers help" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and not __fish_seen_subcommand_from list show volumes controllers help" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and not __fish_seen_subcommand_from list show volumes controllers help" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and not __fish_seen_subcommand_from list show volumes controllers help" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and not __fish_seen_subcommand_from list show volumes controllers help" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and not __fish_seen_subcommand_from list show volumes controllers help" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and not __fish_seen_subcommand_from list show volumes controllers help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and not __fish_seen_subcommand_from list show volumes controllers help" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and not __fish_seen_subcommand_from list show volumes controllers help" -f -a "list" -d 'List plugins with their health across nodes'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and not __fish_seen_subcommand_from list show volumes controllers help" -f -a "show" -d 'Show a plugin'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and not __fish_seen_subcommand_from list show volumes controllers help" -f -a "volumes" -d 'List what the plugin\'s storage holds (ListVolumes) beside csivol\'s records'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and not __fish_seen_subcommand_from list show volumes controllers help" -f -a "controllers" -d 'Show which nodes may host a plugin\'s controller, or allow and disallow nodes'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and not __fish_seen_subcommand_from list show volumes controllers help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from list" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from list" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from list" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from list" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from list" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from list" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from show" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from show" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from show" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from show" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from show" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from show" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from show" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from volumes" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from volumes" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from volumes" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from volumes" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from volumes" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from volumes" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from volumes" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from volumes" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from volumes" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from controllers" -l allow -d 'Allow this node to host the plugin\'s controller (repeatable)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from controllers" -l disallow -d 'No longer allow this node (repeatable); a grant in its token still counts' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from controllers" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from controllers" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from controllers" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from controllers" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from controllers" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from controllers" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from controllers" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from controllers" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from controllers" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from help" -f -a "list" -d 'List plugins with their health across nodes'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from help" -f -a "show" -d 'Show a plugin'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from help" -f -a "volumes" -d 'List what the plugin\'s storage holds (ListVolumes) beside csivol\'s records'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from help" -f -a "controllers" -d 'Show which nodes may host a plugin\'s controller, or allow and disallow nodes'
complete -c csivol -n "__fish_csivol_using_subcommand plugin; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol -n "__fish_csivol_using_subcommand events" -l volume -d 'Only events of this volume' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand events" -l node -d 'Only events of this node' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand events" -l since -d 'Only events of the last DURATION (e.g. 10m, 2h)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand events" -l tail -d 'Only the last N events (after the other filters)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand events" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand events" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand events" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand events" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand events" -s f -l follow -d 'Keep printing new events as they happen (with -o json: one object per line); starts at the end of the log unless --since or --tail says otherwise'
complete -c csivol -n "__fish_csivol_using_subcommand events" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand events" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand events" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand events" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand events" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -f -a "create" -d 'Create a token; its secret is printed once, on stdout'
complete -c csivol -n "__fish_csivol_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -f -a "list" -d 'List tokens (never their secrets): role, node, when created, last used, expiry'
complete -c csivol -n "__fish_csivol_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -f -a "revoke" -d 'Revoke a token: requests with it are refused (401) from then on'
complete -c csivol -n "__fish_csivol_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from create" -l role -d 'What the token may do: `operator` everything, `reader` read only, `claimer` read and claim, renew, queue and release (CI jobs), `node` one node\'s agent' -r -f -a "operator\t''
reader\t''
claimer\t''
node\t''"
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from create" -l node -d 'The node a `node` token acts for' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from create" -l name -d 'A name people recognise (`alice`, `ci-deploy`), unique; the event log names the token\'s actions `ROLE:NAME` (e.g. `operator:alice`) instead of `ROLE:ID`' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from create" -l ttl -d 'The token expires after this long (e.g. 30d, 12h); without it, it lasts until revoked' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from create" -l controller -d 'A `node` token\'s node may host this plugin\'s controller (repeatable); other nodes\' controller registrations are refused unless an operator allows them (`csivol plugin controllers PLUGIN --allow NODE`)' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from create" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from create" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from create" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from create" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from create" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from create" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from create" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from create" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from create" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from list" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from list" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from list" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from list" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from list" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from list" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from revoke" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from revoke" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from revoke" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from revoke" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from revoke" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from revoke" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from revoke" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from revoke" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from revoke" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "create" -d 'Create a token; its secret is printed once, on stdout'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "list" -d 'List tokens (never their secrets): role, node, when created, last used, expiry'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "revoke" -d 'Revoke a token: requests with it are refused (401) from then on'
complete -c csivol -n "__fish_csivol_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol -n "__fish_csivol_using_subcommand completions" -l addr -d 'Server address; several servers of one cluster comma-separated or repeated, tried in turn when one cannot be reached. The token goes over plain http:// only to a loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when $XDG_CONFIG_HOME/csivol/ca.pem exists]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand completions" -l ca-cert -d 'CA certificate (PEM) the server\'s certificate must chain to [env: CSIVOL_CACERT, then $XDG_CONFIG_HOME/csivol/ca.pem, then the system\'s roots]' -r -F
complete -c csivol -n "__fish_csivol_using_subcommand completions" -l token -d 'API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]' -r -f
complete -c csivol -n "__fish_csivol_using_subcommand completions" -s o -l output -d 'Output format: `table` for people (fitted to the terminal: the least important columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts (stable field names)' -r -f -a "table\t'A table fitted to the terminal'
wide\t'A table with nothing cut and times in full'
json\t'JSON, the API\'s types (stable field names)'"
complete -c csivol -n "__fish_csivol_using_subcommand completions" -l no-color -d 'Turn colour off (so does a non-empty NO_COLOR)'
complete -c csivol -n "__fish_csivol_using_subcommand completions" -s q -l quiet -d 'Print only data and errors: no progress, notes or hints on stderr'
complete -c csivol -n "__fish_csivol_using_subcommand completions" -l stale -d 'Allow possibly stale reads: with several servers over etcd, the server answers from its own copy of the state without first catching up with the writes the others acknowledged last (cheaper; reads are consistent by default)'
complete -c csivol -n "__fish_csivol_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol -n "__fish_csivol_using_subcommand completions" -s V -l version -d 'Print version'
complete -c csivol -n "__fish_csivol_using_subcommand help; and not __fish_seen_subcommand_from volume snapshot claim run release status unblock fence detach node plugin events token completions help" -f -a "volume" -d 'Register, create, list, show and deregister volumes'
complete -c csivol -n "__fish_csivol_using_subcommand help; and not __fish_seen_subcommand_from volume snapshot claim run release status unblock fence detach node plugin events token completions help" -f -a "snapshot" -d 'Snapshot volumes; list, show and delete snapshots'
complete -c csivol -n "__fish_csivol_using_subcommand help; and not __fish_seen_subcommand_from volume snapshot claim run release status unblock fence detach node plugin events token completions help" -f -a "claim" -d 'Claim a volume for an alloc on a node; renew a claim\'s lease; list claims'
complete -c csivol -n "__fish_csivol_using_subcommand help; and not __fish_seen_subcommand_from volume snapshot claim run release status unblock fence detach node plugin events token completions help" -f -a "run" -d 'Claim volumes, run a command with them mounted, release them: a CI job in one line'
complete -c csivol -n "__fish_csivol_using_subcommand help; and not __fish_seen_subcommand_from volume snapshot claim run release status unblock fence detach node plugin events token completions help" -f -a "release" -d 'Release an alloc\'s claim on a volume'
complete -c csivol -n "__fish_csivol_using_subcommand help; and not __fish_seen_subcommand_from volume snapshot claim run release status unblock fence detach node plugin events token completions help" -f -a "status" -d 'Show the cluster at a glance, one volume in detail, or the blocked volumes'
complete -c csivol -n "__fish_csivol_using_subcommand help; and not __fish_seen_subcommand_from volume snapshot claim run release status unblock fence detach node plugin events token completions help" -f -a "unblock" -d 'Free volumes held by a lost node: force-release its claims and force-detach'
complete -c csivol -n "__fish_csivol_using_subcommand help; and not __fish_seen_subcommand_from volume snapshot claim run release status unblock fence detach node plugin events token completions help" -f -a "fence" -d 'Power a lost node off through its fence method, then unblock its volumes with the proof'
complete -c csivol -n "__fish_csivol_using_subcommand help; and not __fish_seen_subcommand_from volume snapshot claim run release status unblock fence detach node plugin events token completions help" -f -a "detach" -d 'Take a volume off a node: release every claim it has there'
complete -c csivol -n "__fish_csivol_using_subcommand help; and not __fish_seen_subcommand_from volume snapshot claim run release status unblock fence detach node plugin events token completions help" -f -a "node" -d 'List nodes, or show one'
complete -c csivol -n "__fish_csivol_using_subcommand help; and not __fish_seen_subcommand_from volume snapshot claim run release status unblock fence detach node plugin events token completions help" -f -a "plugin" -d 'List plugins, or show one'
complete -c csivol -n "__fish_csivol_using_subcommand help; and not __fish_seen_subcommand_from volume snapshot claim run release status unblock fence detach node plugin events token completions help" -f -a "events" -d 'Show the audit trail, or follow it'
complete -c csivol -n "__fish_csivol_using_subcommand help; and not __fish_seen_subcommand_from volume snapshot claim run release status unblock fence detach node plugin events token completions help" -f -a "token" -d 'Create, list and revoke API tokens'
complete -c csivol -n "__fish_csivol_using_subcommand help; and not __fish_seen_subcommand_from volume snapshot claim run release status unblock fence detach node plugin events token completions help" -f -a "completions" -d 'Print a shell completion script'
complete -c csivol -n "__fish_csivol_using_subcommand help; and not __fish_seen_subcommand_from volume snapshot claim run release status unblock fence detach node plugin events token completions help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from volume" -f -a "register" -d 'Register an existing volume from a TOML or JSON spec'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from volume" -f -a "adopt" -d 'Register a volume the plugin\'s storage holds and csivol does not know'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from volume" -f -a "import" -d 'Read another orchestrator\'s volumes and write them as csivol register specs'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from volume" -f -a "create" -d 'Create a volume through its plugin\'s controller (CreateVolume), then register it'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from volume" -f -a "list" -d 'List volumes'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from volume" -f -a "show" -d 'Show a volume with its claims and attachments'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from volume" -f -a "deregister" -d 'Forget a volume (its storage is kept), or with --delete destroy it'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from volume" -f -a "expand" -d 'Grow a volume through its plugin (ControllerExpandVolume, then NodeExpandVolume)'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from volume" -f -a "modify" -d 'Change a volume\'s mutable parameters through its plugin (ControllerModifyVolume)'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from snapshot" -f -a "create" -d 'Snapshot a volume (CreateSnapshot), or several together (--group)'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from snapshot" -f -a "list" -d 'List snapshots (group members among them), or the group snapshots (--groups)'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from snapshot" -f -a "show" -d 'Show a snapshot, or a group snapshot with its members'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from snapshot" -f -a "delete" -d 'Delete a snapshot (DeleteSnapshot), or a group snapshot with its members (DeleteVolumeGroupSnapshot)'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from claim" -f -a "renew" -d 'Extend a claim\'s lease from now'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from claim" -f -a "list" -d 'List claims across volumes, oldest first'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from claim" -f -a "show" -d 'Show one claim: its state, its mount (group and who applies it, what csivol\'s ownership change did, its own flags and SELinux context), lease and labels'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from node" -f -a "list" -d 'List nodes with their status, heartbeat and plugins'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from node" -f -a "show" -d 'Show a node: status, heartbeat against the TTL, eligibility, plugins, claims, attachments, blocked volumes and recent events'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from node" -f -a "drain" -d 'Take a node out of service: no new claims on it, then (with --wait) wait until its claims are released by their owners'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from node" -f -a "eligibility" -d 'Whether a node takes new claims (existing claims are not touched)'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from node" -f -a "label" -d 'Set or remove the labels an operator keeps on a node: the only labels fence methods select by and fill their commands from (`{bmc}`)'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from node" -f -a "remove" -d 'Forget a node that holds nothing: no claim, no attachment, nothing blocked'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from plugin" -f -a "list" -d 'List plugins with their health across nodes'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from plugin" -f -a "show" -d 'Show a plugin'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from plugin" -f -a "volumes" -d 'List what the plugin\'s storage holds (ListVolumes) beside csivol\'s records'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from plugin" -f -a "controllers" -d 'Show which nodes may host a plugin\'s controller, or allow and disallow nodes'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from token" -f -a "create" -d 'Create a token; its secret is printed once, on stdout'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from token" -f -a "list" -d 'List tokens (never their secrets): role, node, when created, last used, expiry'
complete -c csivol -n "__fish_csivol_using_subcommand help; and __fish_seen_subcommand_from token" -f -a "revoke" -d 'Revoke a token: requests with it are refused (401) from then on'

# Volume and node names from the server (`csivol __complete volumes|nodes`).
function __csivol_names_kind
    set -l words (commandline -opc)
    set -e words[1]
    # The value of an option that takes a name.
    switch "$words[-1]"
        case --volume
            echo volumes
            return
        case --node
            echo nodes
            return
    end
    string match -q -- '-*' (commandline -ct); and return 1
    switch "$words"
        case 'run* --' 'run* -- *' 'run* --node' 'run* --alloc' 'run* --ttl' 'run* --timeout' 'run* --label' 'run* --gid' 'run* --group' 'run* --mount-flag' 'run* --selinux-context' 'run* --addr' 'run* --ca-cert' 'run* --token' 'run* --output' 'run* -o' 'snapshot create* --' 'snapshot create* -- *' 'snapshot create* --name' 'snapshot create* --group' 'snapshot create* --parameter' 'snapshot create* --timeout' 'snapshot create* --addr' 'snapshot create* --ca-cert' 'snapshot create* --token' 'snapshot create* --output' 'snapshot create* -o'
            return 1
        case 'claim' 'claim renew' 'claim show' 'release' 'status' 'unblock' 'detach' 'volume show' 'volume deregister' 'volume expand' 'volume modify' 'run' 'run *' 'snapshot create' 'snapshot create *'
            echo volumes
        case 'fence' 'node show' 'node drain' 'node eligibility' 'node label' 'node remove'
            echo nodes
        case '*'
            return 1
    end
end

function __csivol_names
    set -l kind (__csivol_names_kind); or return
    csivol __complete $kind 2>/dev/null
end

complete -c csivol -n '__csivol_names_kind >/dev/null' -f -a '(__csivol_names)'
complete -c csivol -n '__csivol_names_kind >/dev/null' -l volume -x -a '(__csivol_names)'
complete -c csivol -n '__csivol_names_kind >/dev/null' -l node -x -a '(__csivol_names)'
