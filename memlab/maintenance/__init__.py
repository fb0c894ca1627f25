"""Maintenance (SPEC §6.3): revise duplicates, decay, forget low salience, capacity inhibition."""

from memlab.maintenance.reasoner import (PASSES, MaintenanceConfig, MaintenanceReport, Reasoner,
                                        jaccard, shingles)

__all__ = ["PASSES", "MaintenanceConfig", "MaintenanceReport", "Reasoner", "jaccard", "shingles"]
