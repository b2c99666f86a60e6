"""Drives the NetBox emulator with pynetbox, a NetBox client the project did not write.

Run by TestPynetbox (pynetbox_test.go) with Debian's /usr/bin/python3 and python3-pynetbox:

    /usr/bin/python3 pynetbox_client.py URL ADMIN_TOKEN FLEETD_TOKEN

Each check prints "ok <name>" or raises; the Go test reads the last line, "done", and then
inspects the emulator's state and deliveries itself. The inventory is the one the Go test seeds
(pynetbox_test.go, seedClientInventory).
"""

import datetime
import sys

import pynetbox
import requests
from pynetbox.core.app import App
from pynetbox.core.query import RequestError

URL, ADMIN, FLEETD = sys.argv[1], sys.argv[2], sys.argv[3]
nb = pynetbox.api(URL, token=ADMIN)
core = App(nb, "core")  # pynetbox 7.0 predates NetBox 4's core app


def check(name):
    def wrap(fn):
        fn()
        print("ok", name, flush=True)
        return fn
    return wrap


def refused(fn, status, *needles):
    """fn must raise RequestError with this status and a body naming each needle."""
    try:
        fn()
    except RequestError as e:
        assert e.req.status_code == status, (e.req.status_code, e.error)
        for n in needles:
            assert n in e.error, (n, e.error)
        return e.error
    raise AssertionError("no refusal, want %d naming %s" % (status, needles))


def names(records):
    return sorted(r.name for r in records)


@check("api-root-and-version")
def _():
    assert nb.status()["netbox-version"] == "4.6.8"
    # pynetbox's nb.version sends no token: NetBox 4 (LOGIN_REQUIRED) answers 403.
    try:
        nb.version
        raise AssertionError("GET /api/ without a token was answered")
    except RequestError as e:
        assert e.req.status_code == 403, e.req.status_code
    r = requests.get(URL + "/api/", headers={"Authorization": "Token " + ADMIN})
    assert r.status_code == 200 and r.headers["API-Version"] == "4.6", (r.status_code, r.headers)
    assert r.json()["dcim"] == URL + "/api/dcim/", r.json()


@check("list-get-paginate")
def _():
    assert nb.dcim.devices.count() == 5
    assert names(nb.dcim.devices.all()) == ["nix-builder", "node1", "node2", "worker-a", "worker-b"]
    assert len(list(nb.dcim.devices.all(limit=2))) == 5  # pynetbox follows next
    assert [d.name for d in nb.dcim.devices.filter(limit=2, offset=2)] == ["node2", "worker-a"]
    d = nb.dcim.devices.get(name="NODE1")  # name is iexact in NetBox 4.6
    assert d.name == "node1" and d.status.value == "planned", d
    assert d.primary_ip4.address == "10.0.0.21/24" and d.device_type.manufacturer.name == "Generic"
    assert nb.dcim.devices.get(999) is None
    try:
        nb.dcim.devices.get(name__isw="node")
        raise AssertionError("get() of two devices returned one")
    except ValueError:
        pass


@check("filters-custom-fields")
def _():
    dev = nb.dcim.devices
    assert names(dev.filter(cf_fleet_class="nixos-builder")) == ["nix-builder"]
    assert names(dev.filter(cf_fleet_class="WORKER")) == ["worker-a", "worker-b"]  # loose: icontains
    assert names(dev.filter(cf_tpm="2.0")) == ["node1", "worker-a"]
    assert names(dev.filter(cf_tpm__n="2.0")) == ["nix-builder", "node2", "worker-b"]  # unset ones too
    assert names(dev.filter(cf_tpm="null")) == ["nix-builder", "node2", "worker-b"]
    assert names(dev.filter(cf_tpm__empty="true")) == ["nix-builder", "node2", "worker-b"]
    assert names(dev.filter(cf_tpm__ic="2")) == ["node1", "worker-a"]
    assert names(dev.filter(cf_fleet_state=["pending", "active"])) == ["worker-a", "worker-b"]
    # A loose text field has no lookups in NetBox 4.6.8; the emulator says so instead of ignoring it.
    refused(lambda: list(dev.filter(cf_fleet_class__n="x")), 400, "cf_fleet_class__n", "does not implement")
    refused(lambda: list(dev.filter(cf_no_such_field="x")), 400, "cf_no_such_field")


@check("filters-model-fields")
def _():
    dev = nb.dcim.devices
    assert names(dev.filter(name__ic="BUILD")) == ["nix-builder"]
    assert names(dev.filter(name__n=["node1", "node2"])) == ["nix-builder", "worker-a", "worker-b"]
    assert names(dev.filter(name__isw="worker")) == ["worker-a", "worker-b"]
    assert names(dev.filter(name__iew="-A")) == ["worker-a"]
    assert names(dev.filter(name__nie="NODE1")) == ["nix-builder", "node2", "worker-a", "worker-b"]
    assert names(dev.filter(serial__empty="true")) == ["nix-builder"]
    assert names(dev.filter(status="active")) == ["worker-a", "worker-b"]
    assert names(dev.filter(status__n="active")) == ["nix-builder", "node1", "node2"]
    assert names(dev.filter(interface_count__gte=2)) == ["node1"]
    assert names(dev.filter(interface_count__lt=1)) == ["nix-builder", "node2"]
    assert names(dev.filter(id=[1, 2])) == ["node1", "node2"]
    assert names(dev.filter(mac_address="aa:bb:cc:00:11:22")) == ["node1"]
    assert names(dev.filter(has_primary_ip="true")) == ["node1"]
    assert names(dev.filter(site="folly", role="server")) == names(dev.all())
    refused(lambda: list(dev.filter(status="retired")), 400, "status", "retired is not one of the available choices")
    refused(lambda: list(dev.filter(site="nowhere")), 400, "site", "nowhere is not one of the available choices")
    refused(lambda: list(dev.filter(id="x")), 400, "Enter a whole number.")
    refused(lambda: list(dev.filter(tenant="acme")), 400, "tenant", "does not implement")
    refused(lambda: list(dev.filter(name__foo="x")), 400, "name__foo", "does not implement")


@check("filters-q")
def _():
    dev = nb.dcim.devices
    assert names(dev.filter("build")) == ["nix-builder"]
    assert names(dev.filter("sn-3")) == ["worker-a"]  # serial icontains
    assert names(dev.filter("10.0.0.21")) == ["node1"]  # the primary IPv4's host
    assert names(nb.dcim.interfaces.filter("bmc")) == ["bmc"]
    assert [m.mac_address for m in nb.dcim.mac_addresses.filter("11:99")] == ["AA:BB:CC:00:11:99"]


@check("output-params")
def _():
    r = requests.get(URL + "/api/dcim/devices/?brief=1&ordering=-name&limit=2",
                     headers={"Authorization": "Token " + ADMIN}).json()
    assert [d["name"] for d in r["results"]] == ["worker-b", "worker-a"], r
    assert sorted(r["results"][0]) == ["description", "display", "id", "name", "url"], r["results"][0]
    r = requests.get(URL + "/api/dcim/devices/1/?fields=id,name,status",
                     headers={"Authorization": "Token " + ADMIN}).json()
    assert list(r) == ["id", "name", "status"], r
    r = requests.get(URL + "/api/dcim/devices/?omit=config_context,custom_fields&start=2&limit=2",
                     headers={"Authorization": "Token " + ADMIN}).json()
    assert r["count"] is None and [d["id"] for d in r["results"]] == [2, 3], r
    assert "custom_fields" not in r["results"][0] and "start=4" in r["next"], r


@check("choices")
def _():
    ch = nb.dcim.devices.choices()
    assert {"value": "decommissioning", "display_name": "Decommissioning"} in ch["status"], ch["status"]
    assert [c["value"] for c in nb.ipam.ip_addresses.choices()["status"]][:2] == ["active", "reserved"]
    assert {"value": "warning", "display_name": "Warning"} in nb.extras.journal_entries.choices()["kind"]
    assert "exact" in [c["value"] for c in nb.extras.custom_fields.choices()["filter_logic"]]


@check("save-one-field")
def _():
    d = nb.dcim.devices.get(name="node2")
    d.serial = "SN-NEW"
    assert d.save()
    assert nb.dcim.devices.get(name="node2").serial == "SN-NEW"
    # A custom-field change sends the whole custom_fields object (what fleetd must survive).
    d = nb.dcim.devices.get(name="worker-b")
    d.custom_fields["disk_serial"] = "DISK-B2"
    assert d.save()
    assert nb.dcim.devices.get(name="worker-b").custom_fields["disk_serial"] == "DISK-B2"
    d.status = "retired"
    refused(d.save, 400, "status")


@check("bulk-update-atomic")
def _():
    dev = nb.dcim.devices
    a, b = dev.get(name="worker-a"), dev.get(name="worker-b")
    out = dev.update([{"id": a.id, "description": "rack 1"}, {"id": b.id, "description": "rack 2"}])
    assert sorted(o.description for o in out) == ["rack 1", "rack 2"], out
    refused(lambda: dev.update([{"id": a.id, "description": "changed"}, {"id": b.id, "status": "retired"}]),
            400, "status")
    assert dev.get(a.id).description == "rack 1", "a refused bulk update changed a device"


@check("bulk-delete-atomic")
def _():
    cs = nb.extras.custom_field_choice_sets
    spare = cs.create(name="a_spare_set", extra_choices=[["a", "A"]])  # ordered before fleet_tpm
    used = cs.get(name="fleet_tpm")
    refused(lambda: cs.delete([spare.id, used.id]), 409, "Unable to delete object", "TPM")
    assert cs.get(spare.id) is not None, "a refused bulk delete deleted an object"
    assert cs.delete([spare.id])
    assert cs.get(spare.id) is None


@check("journal-entries")
def _():
    node1 = nb.dcim.devices.get(name="node1")
    j = nb.extras.journal_entries.create(assigned_object_type="dcim.device", assigned_object_id=node1.id,
                                         kind="info", comments="racked")
    assert j.created_by == 2, j.created_by  # the admin token's user
    j.comments, j.kind = "racked in row 2", "success"
    assert j.save()
    got = nb.extras.journal_entries.get(j.id)
    assert got.comments == "racked in row 2" and got.kind.value == "success", got
    assert [x.id for x in nb.extras.journal_entries.filter(assigned_object_id=node1.id, kind="success")] == [j.id]
    assert got.delete()
    assert nb.extras.journal_entries.get(j.id) is None


@check("change-log")
def _():
    r = requests.patch(URL + "/api/dcim/devices/3/", json={"custom_fields": {"fleet_message": "ok"}},
                       headers={"Authorization": "Token " + FLEETD})
    assert r.status_code == 200, r.text
    changes = core.object_changes
    d = nb.dcim.devices.get(name="node2")
    mine = list(changes.filter(changed_object_type="dcim.device", changed_object_id=d.id))
    assert [c.action.value for c in mine] == ["update"], mine
    c = mine[0]
    assert c.user_name == "admin" and c.object_repr == "node2" and c.changed_object.id == d.id, c
    assert c.prechange_data["serial"] == "SN-2B" and c.postchange_data["serial"] == "SN-NEW", c
    assert "created" not in c.prechange_data and c.display == "DCIM | device node2 updated by admin", c
    created = list(changes.filter(changed_object_type="extras.journalentry", action="create"))
    assert len(created) == 1 and dict(created[0].prechange_data) == {}, created
    fleetd = list(changes.filter(user_name="fleetd"))
    assert len(fleetd) == 1 and fleetd[0].object_repr == "worker-a", fleetd
    later = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)).isoformat()
    assert list(changes.filter(time_after=later)) == []
    assert len(list(changes.filter(time_before=later))) == changes.count()
    refused(lambda: list(changes.filter(time_after="yesterday")), 400, "Enter a valid date/time.")
    refused(lambda: core.object_changes.create(action="create"), 405)


@check("fleetd-calls")
def _():
    # What fleetd's own client sends, through someone else's: the device list with
    # exclude=config_context, one device's MACs and interfaces, and a read-only user's refusal.
    r = requests.get(URL + "/api/dcim/devices/?limit=1000&offset=0&exclude=config_context",
                     headers={"Authorization": "Token " + FLEETD}).json()
    assert r["count"] == 5 and "config_context" not in r["results"][0]
    node1 = nb.dcim.devices.get(name="node1")
    assert len(list(nb.dcim.mac_addresses.filter(device_id=node1.id))) == 3
    assert [i.name for i in nb.dcim.interfaces.filter(device_id=node1.id, mgmt_only="true")] == ["bmc"]
    assert list(nb.dcim.mac_addresses.filter(device_id=999)) == []  # filter_device: none, not 400
    refused(lambda: list(nb.dcim.interfaces.filter(device_id=999)), 400, "999 is not one of the available choices")


@check("save-json-object-custom-field")
def _():
    # Every device fleetd has enrolled holds objects in its JSON custom fields (fleet_identity,
    # fleet_facts). pynetbox 7.0.0's flatten_custom reads v["value"] of every dict-valued custom
    # field, so save() raises KeyError('value') before it sends anything, whatever was changed
    # (netbox-community/pynetbox issue 457; fixed in 7.0.1 by pull request 518). docs/netbox.md
    # says which versions can save these devices.
    facts = {"version": 1, "claimed": {"mac": "AA:BB:CC:00:22:02",
                                       "disks": [{"serial": "DISK-B2", "path": "/dev/disk/by-id/ata-X_DISK-B2"}]}}
    r = requests.patch(URL + "/api/dcim/devices/4/", json={"custom_fields": {"fleet_facts": facts}},
                       headers={"Authorization": "Token " + FLEETD})
    assert r.status_code == 200, r.text
    d = nb.dcim.devices.get(name="worker-b")
    d.serial = "SN-4B"
    if pynetbox.__version__ == "7.0.0":
        try:
            d.save()
        except KeyError as e:
            assert e.args == ("value",), e.args
        else:
            raise AssertionError("pynetbox 7.0.0 saved a device whose JSON custom field holds an object")
        assert nb.dcim.devices.get(name="worker-b").serial == "SN-4", "the failed save sent something"
        # What docs/netbox.md tells 7.0.0's users to do instead: the keys, without the record.
        assert nb.dcim.devices.update([{"id": d.id, "serial": "SN-4B"}])
        got = nb.dcim.devices.get(name="worker-b")
        assert got.serial == "SN-4B" and got.custom_fields["fleet_facts"] == facts, got.custom_fields
    else:
        assert d.save()
        got = nb.dcim.devices.get(name="worker-b")
        assert got.serial == "SN-4B" and got.custom_fields["fleet_facts"] == facts, got.custom_fields


print("done", flush=True)
