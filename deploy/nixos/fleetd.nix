# NixOS module for fleetd (docs/design.md §7).
#
#   services.fleetd            the service on spore (`fleetd serve`), hardened: its own system
#                              user, no capabilities, the file system read-only except the Kea
#                              reservations directory, secrets passed as systemd credentials.
#   services.fleetd-boot-check the node's hourly boot check (`fleetd boot-check`, docs/design.md §5) for
#                              NixOS nodes: a oneshot service and its timer; with spireAgent.enable,
#                              SPIRE's agent attesting the node with tpm_devid from the LDevID files
#                              in `dir`, restarted by a path unit when they are renewed.
#
# fleetd is not in nixpkgs; `package` is usually the release binary wrapped by ./package.nix
# (see deploy/README.md). Secrets never enter the Nix store: `secretFiles` names files on the host,
# systemd copies them into /run/credentials/fleetd.service/<name> when the service starts, and
# fleetd.yaml refers to them there.
{ config, lib, pkgs, ... }:

let
  inherit (lib) mkEnableOption mkOption mkIf types;
  cfg = config.services.fleetd;
  check = config.services.fleetd-boot-check;
  credentialDir = "/run/credentials/fleetd.service";
  # The listeners set here, by fleetd.yaml key (http, https); each overrides listen.<key>.
  listeners = lib.filterAttrs (key: addr: addr != null) cfg.listen;
  listenArgs = lib.concatLists (lib.mapAttrsToList (key: addr: [ "--listen-${key}" addr ]) listeners);
  # The last ":"-separated field of "host:port", "[::1]:8443" or ":8443".
  port = addr: lib.toInt (lib.last (lib.splitString ":" addr));
  listenPorts = map port (lib.attrValues listeners);

  # What every fleetd process keeps from the host: nothing it does not need (systemd.exec(5)).
  hardening = {
    NoNewPrivileges = true;
    CapabilityBoundingSet = "";
    AmbientCapabilities = "";
    ProtectSystem = "strict";
    ProtectHome = true;
    PrivateTmp = true;
    ProtectKernelTunables = true;
    ProtectKernelModules = true;
    ProtectKernelLogs = true;
    ProtectControlGroups = true;
    ProtectClock = true;
    ProtectHostname = true;
    ProtectProc = "invisible";
    RestrictNamespaces = true;
    RestrictRealtime = true;
    RestrictSUIDSGID = true;
    LockPersonality = true;
    MemoryDenyWriteExecute = true;
    RemoveIPC = true;
    SystemCallArchitectures = "native";
    SystemCallFilter = [ "@system-service" "~@privileged" ];
    SystemCallErrorNumber = "EPERM";
    UMask = "0022";
  };
in
{
  options.services.fleetd = {
    enable = mkEnableOption "fleetd, the service that turns bare machines into nodes (runs `fleetd serve`)";

    package = mkOption {
      type = types.package;
      description = "The fleetd package; its bin/fleetd is run. See deploy/nixos/package.nix.";
    };

    cloudInitPackage = mkOption {
      type = types.nullOr types.package;
      default = pkgs.cloud-init;
      defaultText = "pkgs.cloud-init";
      description = ''
        cloud-init on fleetd's path: at start (and in `fleetd check`) fleetd validates every
        cloud-init-nocloud class's user-data with the real `cloud-init schema`, and refuses a class
        the nodes' cloud-init would refuse. null leaves it out; fleetd then logs that it did not
        validate them.
      '';
    };

    configFile = mkOption {
      type = types.path;
      example = "/etc/fleetd/fleetd.yaml";
      description = ''
        fleetd.yaml. It must be readable by the fleetd user and hold no secrets: it names secret
        files, which come from `secretFiles`. Relative paths in it are relative to its directory.
      '';
    };

    secretFiles = mkOption {
      type = types.attrsOf types.str;
      default = { };
      example = {
        netbox-token = "/var/lib/secrets/fleetd/netbox-token";
        ldevid-ca-key = "/var/lib/secrets/fleetd/ldevid-ca.key";
      };
      description = ''
        Secret files by credential name, loaded with systemd's LoadCredential= (the files may be
        root-only). fleetd.yaml refers to each as ${credentialDir}/<name>. Paths are strings so
        that the secrets are never copied into the Nix store.
      '';
    };

    listen = {
      http = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "127.0.0.1:8080";
        description = "host:port of the plain listener (`fleetd serve --listen-http`, over listen.http).";
      };
      https = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = ":8443";
        description = "host:port of the TLS listener (`fleetd serve --listen-https`, over listen.https).";
      };
    };

    restrictBind = mkOption {
      type = types.bool;
      default = true;
      description = ''
        When any `listen` address is set, let the service bind those ports and no other (systemd's
        SocketBindAllow=). Set every listener fleetd.yaml enables here, or turn this off.
      '';
    };

    openFirewall = mkOption {
      type = types.bool;
      default = false;
      description = "Open the ports of the `listen` addresses in the firewall.";
    };

    keaReservationsDir = mkOption {
      type = types.str;
      default = "/var/lib/kea/fleet";
      description = ''
        The directory of kea.reservations_file: the only path fleetd may write. It is created
        owned by the fleetd user and `keaGroup`, mode 0755, so Kea can read the file fleetd writes.
      '';
    };

    keaGroup = mkOption {
      type = types.str;
      default = "kea";
      description = ''
        Kea's group. fleetd joins it to reach Kea's control socket (kea.control_socket), which Kea
        must create group-writable; see deploy/README.md for nixpkgs' Kea module.
      '';
    };

    extraGroups = mkOption {
      type = types.listOf types.str;
      default = [ ];
      description = "Further supplementary groups of the fleetd user.";
    };
  };

  options.services.fleetd-boot-check = {
    enable = mkEnableOption "the node's hourly boot check (`fleetd boot-check`)";

    package = mkOption {
      type = types.package;
      description = "The fleetd package; its bin/fleetd is run.";
    };

    url = mkOption {
      type = types.str;
      example = "https://spore.lan:8443";
      description = "fleetd's public URL (public_url in spore's fleetd.yaml).";
    };

    tpm = mkOption {
      type = types.str;
      default = "/dev/tpmrm0";
      description = "The TPM resource manager device.";
    };

    dir = mkOption {
      type = types.str;
      default = "/var/lib/fleetd-node";
      description = "The directory holding lak.pem and lak.blob, delivered by the node's configuration (read only).";
    };

    onCalendar = mkOption {
      type = types.str;
      default = "hourly";
      description = "When to check (systemd.time(7)); fleetd reports a node missing after 2 h.";
    };

    spireAgent = {
      enable = mkEnableOption "SPIRE's agent, attesting the node with tpm_devid from the LDevID files in `dir` (docs/enrollment.md)";

      package = mkOption {
        type = types.package;
        description = "The SPIRE package; its bin/spire-agent is run.";
      };

      configFile = mkOption {
        type = types.path;
        description = "The agent's configuration (deploy/spire/agent.conf): its tpm_devid plugin reads ldevid.pem, ldevid.pub and ldevid.priv in `dir`.";
      };
    };
  };

  config = lib.mkMerge [
    (mkIf cfg.enable {
      users.users.fleetd = {
        isSystemUser = true;
        group = "fleetd";
        description = "fleetd service";
      };
      users.groups.fleetd = { };

      systemd.tmpfiles.rules = [ "d ${cfg.keaReservationsDir} 0755 fleetd ${cfg.keaGroup} - -" ];

      assertions = [{
        assertion = cfg.openFirewall -> listeners != { };
        message = "services.fleetd.openFirewall needs services.fleetd.listen.http or .https (the ports to open).";
      }];

      networking.firewall.allowedTCPPorts = lib.optionals cfg.openFirewall listenPorts;

      systemd.services.fleetd = {
        description = "fleetd: NetBox-driven enrollment and provisioning";
        documentation = [ "https://github.com/folly-infra/fleetd/tree/main/docs" ];
        wantedBy = [ "multi-user.target" ];
        wants = [ "network-online.target" ];
        after = [ "network-online.target" "kea-dhcp4-server.service" ];
        path = lib.optional (cfg.cloudInitPackage != null) cfg.cloudInitPackage;
        serviceConfig = hardening // {
          ExecStart = lib.escapeShellArgs ([
            "${cfg.package}/bin/fleetd" "serve" "--config" "${cfg.configFile}"
          ] ++ listenArgs);
          Restart = "on-failure";
          RestartSec = "5s";
          # Go's soft memory limit, as deploy/systemd/fleetd.service (docs/operate.md, "Memory").
          Environment = [ "GOMEMLIMIT=96MiB" ];
          User = "fleetd";
          Group = "fleetd";
          SupplementaryGroups = [ cfg.keaGroup ] ++ cfg.extraGroups;
          LoadCredential = lib.mapAttrsToList (name: path: "${name}:${path}") cfg.secretFiles;
          ReadWritePaths = [ cfg.keaReservationsDir ];
          PrivateDevices = true;
          DevicePolicy = "closed";
          RestrictAddressFamilies = [ "AF_INET" "AF_INET6" "AF_UNIX" ];
        } // lib.optionalAttrs (cfg.restrictBind && listeners != { }) {
          SocketBindAllow = map (p: "tcp:${toString p}") listenPorts;
          SocketBindDeny = "any";
        };
      };
    })

    (mkIf check.enable {
      systemd.services.fleetd-boot-check = {
        description = "fleetd boot check: quote the TPM for fleetd";
        wants = [ "network-online.target" ];
        after = [ "network-online.target" ];
        unitConfig.ConditionPathExists = [ check.tpm "${check.dir}/lak.pem" ];
        serviceConfig = hardening // {
          Type = "oneshot";
          # root without capabilities: the event log in securityfs is root-only (0440) and
          # /dev/tpmrm0 and the LAK files belong to root; owning them needs no capability.
          User = "root";
          ExecStart = lib.escapeShellArgs [
            "${check.package}/bin/fleetd" "boot-check" "--url" check.url "--tpm" check.tpm "--dir" check.dir
          ];
          DevicePolicy = "closed";
          DeviceAllow = [ "${check.tpm} rw" ];
          # The one writable place: renewed certificates are installed there (docs/boot-checks.md).
          ReadWritePaths = [ check.dir ];
          RestrictAddressFamilies = [ "AF_INET" "AF_INET6" "AF_UNIX" ];
          SocketBindDeny = "any";
          TimeoutStartSec = "5min";
        };
      };
      systemd.timers.fleetd-boot-check = {
        description = "fleetd boot check, hourly and soon after boot";
        wantedBy = [ "timers.target" ];
        timerConfig = {
          OnBootSec = "2min";
          OnCalendar = check.onCalendar;
          RandomizedDelaySec = "5min";
          Persistent = true;
        };
      };
    })

    (mkIf (check.enable && check.spireAgent.enable) {
      # The agent reads the LDevID files once, at start, and each renewal attests as a new agent
      # ID (entries hang off a node alias, deploy/spire/README.md).
      systemd.services.spire-agent = {
        description = "SPIRE agent: the node's identity from its fleetd LDevID (tpm_devid)";
        wantedBy = [ "multi-user.target" ];
        wants = [ "network-online.target" ];
        after = [ "network-online.target" ];
        unitConfig.ConditionPathExists = [ check.tpm "${check.dir}/ldevid.pem" ];
        serviceConfig = {
          ExecStart = lib.escapeShellArgs [ "${check.spireAgent.package}/bin/spire-agent" "run" "-config" "${check.spireAgent.configFile}" ];
          Restart = "on-failure";
          RestartSec = "10s";
          User = "root";
          StateDirectory = "spire/agent";
          RuntimeDirectory = "spire/agent/public";
          RuntimeDirectoryPreserve = true;
          DevicePolicy = "closed";
          DeviceAllow = [ "${check.tpm} rw" ];
          NoNewPrivileges = true;
          ProtectSystem = "strict";
          ProtectHome = true;
          PrivateTmp = true;
        };
      };
      # `fleetd boot-check` renames renewed files into place: restart the agent so that it
      # presents them.
      systemd.paths.spire-agent-ldevid = {
        description = "Restart the SPIRE agent when the node's LDevID files change";
        wantedBy = [ "multi-user.target" ];
        pathConfig = {
          PathChanged = map (f: "${check.dir}/${f}") [ "ldevid.pem" "ldevid.pub" "ldevid.priv" ];
          Unit = "spire-agent-ldevid.service";
        };
      };
      systemd.services.spire-agent-ldevid = {
        description = "Restart the SPIRE agent with the node's renewed LDevID files";
        serviceConfig = {
          Type = "oneshot";
          ExecStart = "/run/current-system/systemd/bin/systemctl try-restart spire-agent.service";
        };
      };
    })
  ];
}
