"""Lockstep updater:

executes waves node by node over Redfish/PLDM and the node agents."""
