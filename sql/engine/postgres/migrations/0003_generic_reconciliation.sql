-- 0003: reconciliation items of any application.  An item's subject is the
-- application's word (a payment, a refund, a signature…), no longer a fixed list.

ALTER TABLE recon_items DROP CONSTRAINT recon_items_subject_known;
