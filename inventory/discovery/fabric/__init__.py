"""The compute fabric above the rack, read from what a site has (issue 33; pure: no Django, no I/O).

Three readers, one result (`parsed.ParsedFabric`): `ibnetdiscover` (infiniband-diags' topology output),
`topograph` (the node labels NVIDIA Topograph puts on Kubernetes nodes) and `site_file` (a YAML or CSV file
an operator writes for a site with neither). Each refuses bad input whole, in words naming the line (or the
node) it stopped at; `inventory.fabric_import` applies a parsed fabric to the inventory in one transaction.
"""
